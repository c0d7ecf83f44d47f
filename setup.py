"""Builds clustersim's optional C accelerator; the package's metadata is in setup.cfg.

``clustersim/network/_cmaxmin.c`` is the max-min sharing loops of the ``flow`` network model
(clustersim/network/maxmin.py) in C. It is optional: where no C compiler works the build skips
it and clustersim runs the same loops in Python, with the same results bit for bit.
``clustersim/experiments/_c1f1b.c`` is 1F1B's pass loops of the pipeline estimate
(clustersim/experiments/steady_1f1b.py), and ``clustersim/workload/_chost.c`` the host's race
with the GPU stream (clustersim/workload/host.py), optional in the same way.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """No contraction of a * b + c into one fused multiply-add (GCC's default where the
    target has FMA): it rounds once where Python rounds twice. The C refuses -ffast-math itself."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off"]
        super().build_extensions()


setup(
    ext_modules=[
        Extension(name, [source], depends=["clustersim/accel.h"], optional=True)
        for name, source in (
            ("clustersim.network._cmaxmin", "clustersim/network/_cmaxmin.c"),
            ("clustersim.experiments._c1f1b", "clustersim/experiments/_c1f1b.c"),
            ("clustersim.workload._chost", "clustersim/workload/_chost.c"),
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
