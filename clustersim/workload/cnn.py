"""CNNs of the PipeDream/GPipe era: VGG-16 and ResNet-50, layer by layer.

A "layer" here is the unit a pipeline stage boundary may fall between: a VGG conv (with
its ReLU and any following max-pool) or FC layer; a ResNet stem, bottleneck block or
classifier. Convolutions are costed as implicit GEMMs (M = b·H_out·W_out, N = C_out,
K = C_in·k²), as cuDNN runs them; a conv keeps its input for the weight gradient, a
batch-norm its input, a ReLU its output (Chen et al. 2016's accounting).
Sizes (224×224, 1000 classes): VGG-16 138.36M params, 15.5 GMAC/image (Simonyan &
Zisserman 2015); ResNet-50 v1.5 25.56M params, 4.1 GMAC/image (He et al. 2016; torchvision).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ScenarioError
from .ops import LayerOp, elementwise, gemm


@dataclass(frozen=True)
class CNNLayer:
    """One partitionable unit: its ops and the bytes of its output (sent downstream)."""

    name: str
    ops: tuple[LayerOp, ...]
    output_bytes: float


def _conv(name, b, hw_in, cin, cout, k, stride, e, bn):
    hw = hw_in // stride
    m, n, kk = b * hw * hw, cout, cin * k * k
    ops = [gemm(name, m, n, kk, e, activation=b * hw_in * hw_in * cin * e)]
    if bn:
        ops.append(elementwise(f"{name}_bn", m * n, 2 * e, 3 * e, params=2 * cout, activation=m * n * e))
    ops.append(elementwise(f"{name}_relu", m * n, 2 * e, 3 * e, activation=m * n * e))
    if not bn:  # VGG convs carry a bias
        ops[0] = replace(ops[0], params=ops[0].params + cout)
    return ops, hw


def vgg16(b: int, e: int, image: int = 224, classes: int = 1000) -> list[CNNLayer]:
    """VGG-16 (configuration D): 13 convs (pools folded into the conv before) + 3 FC."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, hw, cin = [], image, 3
    for i, c in enumerate(cfg):
        if c == "M":
            continue
        ops, hw = _conv(f"conv{len(layers) + 1}", b, hw, cin, c, 3, 1, e, bn=False)
        cin = c
        if i + 1 < len(cfg) and cfg[i + 1] == "M":
            ops.append(elementwise(f"pool{len(layers) + 1}", b * hw * hw * c, 1.25 * e, 2.25 * e))
            hw //= 2
        layers.append(CNNLayer(ops[0].name, tuple(ops), b * hw * hw * c * e))
    dims = [cin * hw * hw, 4096, 4096, classes]
    for j in range(3):
        fc = gemm(f"fc{j + 6}", b, dims[j + 1], dims[j], e, activation=b * dims[j] * e)
        fc = replace(fc, params=fc.params + dims[j + 1])  # + bias
        layers.append(CNNLayer(fc.name, (fc,), b * dims[j + 1] * e))
    return layers


def resnet50(b: int, e: int, image: int = 224, classes: int = 1000) -> list[CNNLayer]:
    """ResNet-50 v1.5: stem, 16 bottleneck blocks [3, 4, 6, 3], classifier."""
    stem, hw = _conv("stem", b, image, 3, 64, 7, 2, e, bn=True)
    stem.append(elementwise("maxpool", b * hw * hw * 64, 1.25 * e, 2.25 * e))
    hw //= 2
    layers = [CNNLayer("stem", tuple(stem), b * hw * hw * 64 * e)]
    cin = 64
    for stage, (blocks, mid) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        cout = mid * 4
        for blk in range(blocks):
            stride = 2 if blk == 0 and stage > 0 else 1
            name = f"res{stage + 2}.{blk}"
            a, _ = _conv(f"{name}.a", b, hw, cin, mid, 1, 1, e, bn=True)
            bb, hw_out = _conv(f"{name}.b", b, hw, mid, mid, 3, stride, e, bn=True)
            c, _ = _conv(f"{name}.c", b, hw_out, mid, cout, 1, 1, e, bn=True)
            ops = a + bb + c[:-1]  # the last ReLU follows the residual add
            if blk == 0:
                ops += _conv(f"{name}.proj", b, hw, cin, cout, 1, stride, e, bn=True)[0][:-1]
            ops.append(
                elementwise(
                    f"{name}.add_relu",
                    b * hw_out * hw_out * cout,
                    3 * e,
                    3 * e,
                    activation=b * hw_out * hw_out * cout * e,
                )
            )
            layers.append(CNNLayer(name, tuple(ops), b * hw_out * hw_out * cout * e))
            hw, cin = hw_out, cout
    pool = elementwise("avgpool", b * hw * hw * cin, 1.0 * e, 2.0 * e)
    fc = gemm("fc", b, classes, cin, e, activation=b * cin * e)
    fc = replace(fc, params=fc.params + classes)  # + bias
    layers.append(CNNLayer("classifier", (pool, fc), b * classes * e))
    return layers


CNN_BUILDERS = {"vgg16": vgg16, "resnet50": resnet50}


def cnn_layers(preset: str, b: int, e: int, image: int = 224, classes: int = 1000) -> list[CNNLayer]:
    """The layers of CNN ``preset`` for micro-batch ``b`` and ``e``-byte elements."""
    if preset not in CNN_BUILDERS:
        raise ScenarioError("model.preset", preset, f"known CNN presets: {', '.join(CNN_BUILDERS)}")
    return CNN_BUILDERS[preset](b, e, image, classes)
