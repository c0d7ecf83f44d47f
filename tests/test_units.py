import pytest

from clustersim import units
from clustersim.errors import ScenarioError


@pytest.mark.parametrize(
    "text,kind,expected",
    [
        ("1.5 ms", "time", 1.5e-3),
        ("30 us", "time", 30e-6),
        ("2 s", "time", 2.0),
        ("7ns", "time", 7e-9),
        ("200 Gbit/s", "bandwidth", 25e9),
        ("25 GB/s", "bandwidth", 25e9),
        ("100 Mbps", "bandwidth", 12.5e6),
        ("16 MiB", "bytes", 16 * 2**20),
        ("80 GiB", "bytes", 80 * 2**30),
        ("4096 B", "bytes", 4096),
        ("1 kB", "bytes", 1000),
        ("312 TFLOP/s", "flops", 312e12),
        ("1e3 GFLOP/s", "flops", 1e12),
        (3, "time", 3.0),
        (2.5e9, "bandwidth", 2.5e9),
    ],
)
def test_parse(text, kind, expected):
    assert units.parse(text, kind) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "text,kind",
    [
        ("5 GB", "time"),
        ("1 ms", "bytes"),
        ("fast", "bandwidth"),
        ("200 Gbit", "bandwidth"),
        (True, "time"),
        (None, "bytes"),
    ],
)
def test_wrong_unit_names_field_and_accepted(text, kind):
    with pytest.raises(ScenarioError) as e:
        units.parse(text, kind, field="model.forward")
    msg = str(e.value)
    assert msg.startswith("model.forward: ")
    assert repr(text) in msg
    assert "expected" in msg


def test_parse_bytes_is_int():
    assert units.parse_bytes("1.5 KiB") == 1536
