"""Tensor statistics (gradtui.engine.stats.summary) against torch's own reductions: shape, dtype, norm,
min, max, mean, non-finite counts, values only for small tensors, histograms, JSON form."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gradtui.engine.stats.summary import describe, summarize, summarize_all
from gradtui.protocol.stats import HISTOGRAM_BINS, VALUES_LIMIT, Stats, format_number, format_stats

pytestmark = pytest.mark.timeout(60)

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1,), (8, 8), (3, 5, 7), (1000,)])
def test_stats_match_torch(seed, dtype, shape):
    torch.manual_seed(seed)
    t = torch.randn(shape, dtype=dtype) * 3 + 0.5
    s = summarize(t)
    assert s.shape == shape and s.numel == t.numel()
    assert s.dtype == str(dtype).removeprefix("torch.") and s.device == "cpu"
    assert s.min == t.min().item() and s.max == t.max().item()  # exact: no arithmetic involved
    assert s.norm == pytest.approx(torch.linalg.vector_norm(t.double()).item(), rel=1e-6)
    assert s.mean == pytest.approx(t.double().mean().item(), rel=1e-5, abs=1e-6)
    assert s.nonfinite == 0
    assert s.histogram is None
    if t.numel() <= VALUES_LIMIT:
        assert s.values == tuple(t.flatten().tolist())
        assert s.preview == s.values[:8]
    else:
        assert s.values is None


def test_values_only_up_to_the_limit():
    assert VALUES_LIMIT == 64
    at = summarize(torch.arange(64.0))
    assert at.values == tuple(float(i) for i in range(64))
    assert "values" in at.to_json()
    above = summarize(torch.arange(65.0))
    assert above.values is None
    assert "values" not in above.to_json()


def test_requires_grad_tensor_is_summarized_without_recording():
    t = torch.randn(4, requires_grad=True)
    s = summarize(t * 2)
    assert s.norm == pytest.approx(torch.linalg.vector_norm(t * 2).item())


@pytest.mark.parametrize(
    ("values", "nonfinite"),
    [
        ([1.0, NAN, 2.0], 1),
        ([INF, 1.0], 1),
        ([-INF, INF, NAN, 0.0], 3),
        ([NAN, NAN], 2),
    ],
)
def test_nonfinite_count(values, nonfinite):
    t = torch.tensor(values)
    s = summarize(t, histogram=True)
    assert s.nonfinite == nonfinite == int((~torch.isfinite(t)).sum())
    finite = int(torch.isfinite(t).sum())
    assert sum(s.histogram) == finite
    assert len(s.histogram) == HISTOGRAM_BINS


def test_large_tensor_with_nan():
    t = torch.randn(10_000)
    t[17] = NAN
    t[5000] = -INF
    s = summarize(t, histogram=True)
    assert s.nonfinite == 2
    assert sum(s.histogram) == 10_000 - 2
    assert s.values is None


def test_to_json_spells_nonfinite_numbers():
    s = summarize(torch.tensor([NAN, INF, -INF, 1.0]))
    data = s.to_json()
    assert data["values"] == ["nan", "inf", "-inf", 1.0]
    assert data["nonfinite"] == 3
    assert data["norm"] == "nan" or data["norm"] == "inf"
    text = json.dumps(data, allow_nan=False)  # strict JSON: no NaN literal
    assert json.loads(text) == data


def test_to_json_keys():
    data = summarize(torch.tensor([[1.0, 2.0]])).to_json()
    assert list(data) == ["shape", "dtype", "device", "norm", "min", "max", "mean", "nonfinite", "values"]
    assert data.pop("norm") == pytest.approx(math.sqrt(5.0), rel=1e-7)  # float32 arithmetic
    assert data == {
        "shape": [1, 2],
        "dtype": "float32",
        "device": "cpu",
        "min": 1.0,
        "max": 2.0,
        "mean": 1.5,
        "nonfinite": 0,
        "values": [1.0, 2.0],
    }


@pytest.mark.parametrize("seed", range(5))
def test_histogram_counts_every_finite_value(seed):
    torch.manual_seed(seed)
    t = torch.randn(1000) * 10
    s = summarize(t, histogram=True)
    assert sum(s.histogram) == 1000
    expected = torch.histc(t, bins=HISTOGRAM_BINS, min=t.min().item(), max=t.max().item())
    assert s.histogram == tuple(int(c) for c in expected.tolist())


@pytest.mark.parametrize(
    "t",
    [
        torch.full((10,), 3.0),  # all equal
        torch.tensor([1e300, -1e300, 0.0], dtype=torch.float64),  # beyond float32
        torch.tensor([1e-300, 2e-300, 3e-300], dtype=torch.float64),  # below float32
        torch.tensor([-3e38, 0.0, 3e38]),  # float32 range overflows
        torch.randn(50).half(),
        torch.randn(50).bfloat16(),
    ],
)
def test_histogram_edge_cases(t):
    s = summarize(t, histogram=True)
    assert sum(s.histogram) == t.numel()


def test_histogram_of_nothing_finite():
    s = summarize(torch.tensor([NAN, INF]), histogram=True)
    assert s.histogram == (0,) * HISTOGRAM_BINS


@pytest.mark.parametrize(
    ("t", "dtype"),
    [
        (torch.tensor([1, 2, 3]), "int64"),
        (torch.tensor([True, False]), "bool"),
        (torch.tensor([1.5, 2.5], dtype=torch.float16), "float16"),
        (torch.tensor([1.5, 2.5], dtype=torch.bfloat16), "bfloat16"),
    ],
)
def test_other_dtypes(t, dtype):
    s = summarize(t, histogram=True)
    assert s.dtype == dtype
    wide = t.double()
    assert s.min == wide.min().item() and s.max == wide.max().item()
    assert s.norm == pytest.approx(torch.linalg.vector_norm(wide).item())
    assert s.mean == pytest.approx(wide.mean().item())


def test_complex_uses_magnitudes():
    s = summarize(torch.tensor([3 + 4j, 0j], dtype=torch.complex64))
    assert s.dtype == "complex64"
    assert (s.min, s.max, s.mean) == (0.0, 5.0, 2.5)


def test_empty_tensor():
    s = summarize(torch.zeros(0, 3))
    assert s.shape == (0, 3) and s.values == () and s.nonfinite == 0 and s.norm == 0.0


def test_non_contiguous_and_sparse():
    t = torch.arange(12.0).reshape(3, 4).t()
    assert summarize(t).values == tuple(t.flatten().tolist())
    sparse = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    s = summarize(sparse)
    assert s.values == (0.0, 2.0, 3.0, 0.0) and s.max == 3.0


def test_summarize_all_keeps_none():
    out = summarize_all((torch.ones(2), None, torch.zeros(1)))
    assert out[1] is None
    assert isinstance(out[0], Stats) and out[0].values == (1.0, 1.0)
    assert summarize_all([], histogram=True) == ()
    assert summarize_all((torch.ones(3),), histogram=True)[0].histogram is not None


def test_stats_are_plain_data():
    s = summarize(torch.randn(100), histogram=True)
    for name in Stats.__slots__:
        value = getattr(s, name)
        assert not isinstance(value, torch.Tensor)
        if isinstance(value, tuple):
            assert all(isinstance(v, (int, float)) for v in value)
    with pytest.raises(AttributeError):
        s.norm = 1.0  # frozen


def test_formatting():
    assert format_number(NAN) == "nan" and format_number(INF) == "inf" and format_number(-INF) == "-inf"
    assert format_number(12.0) == "12" and format_number(0.000123456) == "0.0001235"
    assert format_stats(None) == "None"
    line = format_stats(summarize(torch.tensor([12.0])))
    assert line == "[1] float32 cpu  norm 12  min 12  max 12  mean 12  values [12]"
    line = format_stats(summarize(torch.tensor([1.0, NAN])))
    assert "nonfinite 1" in line
    assert "values" not in format_stats(summarize(torch.zeros(9)))  # more than a preview
    assert describe(torch.ones(2)).startswith("[2] float32 cpu")
    assert describe((torch.ones(1), torch.zeros(1))).startswith("[0] [1] float32")
    assert describe(3) == "3"
    assert len(describe("x" * 1000)) == 400


def test_mean_of_huge_finite_float32_values_stays_finite():
    """The sum is taken in float64: two values near float32's max have a finite mean."""
    stats = summarize(torch.tensor([3e38, 3e38], dtype=torch.float32))
    assert stats.nonfinite == 0
    assert stats.mean == pytest.approx(3e38, rel=1e-6)


def test_norm_of_huge_finite_float32_values_stays_finite():
    """A float32 norm that overflows is recomputed in float64: finite values, finite norm."""
    stats = summarize(torch.tensor([3e38, 3e38], dtype=torch.float32))
    assert stats.norm == pytest.approx(3e38 * 2**0.5, rel=1e-6)


def test_light_stats_take_only_the_norm_of_big_tensors():
    """Light stats (a running UI): exact norm and non-finite count, no min/max/mean."""
    torch.manual_seed(0)
    t = torch.randn(100, 7)
    light = summarize(t, light=True)
    assert light.norm == torch.linalg.vector_norm(t).item()
    assert (light.min, light.max, light.mean, light.nonfinite) == (None, None, None, 0)
    assert light.to_json()["min"] is None and "values" not in light.to_json()
    t[3, 2] = float("nan")
    t[5, 1] = float("inf")
    assert summarize(t, light=True).nonfinite == 2
    small = torch.tensor([1.0, -2.0])
    assert summarize(small, light=True) == summarize(small)  # small tensors: always everything


def test_light_stats_survive_float32_overflow():
    stats = summarize(torch.full((100,), 3e37), light=True)
    assert stats.nonfinite == 0 and stats.norm == pytest.approx(3e38, rel=1e-6)


# ---- tensors of more than CHUNK elements: summarized chunk by chunk -----------------------

SMALL_CHUNK = 1 << 16  # a 2M-element tensor then takes 31 chunks


@pytest.fixture
def chunked(monkeypatch):
    """Lower the chunked path's threshold, and record the size of every chunk that is converted
    or flattened: none may be bigger than a chunk (no full copy of the tensor)."""
    from gradtui.engine.stats import summary

    monkeypatch.setattr(summary, "CHUNK", SMALL_CHUNK)
    seen = []
    convert = summary._as_real_float

    def recording(t):
        seen.append(t.numel())
        return convert(t)

    monkeypatch.setattr(summary, "_as_real_float", recording)
    tolist = torch.Tensor.tolist
    listed = []

    def counting_tolist(self):
        listed.append(self.numel())
        return tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    yield seen
    assert max(seen, default=0) <= SMALL_CHUNK, "a copy bigger than a chunk"
    assert max(listed, default=0) <= VALUES_LIMIT, "a big tensor went to Python"


def _oracle(t: torch.Tensor) -> torch.Tensor:
    return (t.abs() if t.is_complex() else t).double()


def _check_against_torch(s: Stats, t: torch.Tensor) -> None:
    wide = _oracle(t)
    finite = wide[torch.isfinite(wide)]
    assert s.shape == tuple(t.shape) and s.numel == t.numel() and s.values is None
    assert s.nonfinite == int((~torch.isfinite(wide)).sum())
    if s.nonfinite == 0:
        assert s.min == wide.min().item() and s.max == wide.max().item()  # exact
        assert s.norm == pytest.approx(torch.linalg.vector_norm(wide).item(), rel=1e-6)
        assert s.mean == pytest.approx(wide.mean().item(), rel=1e-5, abs=1e-6)
    if s.histogram is not None:
        assert sum(s.histogram) == finite.numel()
        assert len(s.histogram) == HISTOGRAM_BINS


@pytest.mark.parametrize("seed", range(3))
def test_chunked_stats_match_torch(chunked, seed):
    torch.manual_seed(seed)
    t = torch.randn(2_000_000) * 3 + 0.5
    s = summarize(t, histogram=True)
    _check_against_torch(s, t)
    # histc's own counts (float32 counts are exact below 2**24)
    expected = torch.histc(t, bins=HISTOGRAM_BINS, min=t.min().item(), max=t.max().item())
    assert s.histogram == tuple(int(c) for c in expected.tolist())
    assert s.preview == tuple(t[:8].tolist())
    assert len(chunked) > 30  # it did go chunk by chunk
    assert summarize(t) == Stats(s.shape, s.dtype, s.device, s.norm, s.min, s.max, s.mean, 0)


def test_chunked_float64_and_odd_shapes(chunked):
    torch.manual_seed(0)
    t = torch.randn(7, 300_001, dtype=torch.float64) * 1e-3  # rows bigger than a chunk
    s = summarize(t, histogram=True)
    _check_against_torch(s, t)
    assert s.dtype == "float64"
    expected = torch.histc(t, bins=HISTOGRAM_BINS, min=t.min().item(), max=t.max().item())
    assert s.histogram == tuple(int(c) for c in expected.tolist())


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(1000, 2100).t(),  # transposed: rows of 1000 strided values
        lambda: torch.randn(3, 700_000).t(),  # transposed, rows shorter than a chunk
        lambda: torch.randn(2100, 1000)[:, ::2],  # every other column
        lambda: torch.randn(1, 1000).expand(2100, 1000),  # broadcast: stride 0
        lambda: torch.randn(5, 1, 3, 200_000).transpose(0, 3),  # rows bigger than a chunk, size-1 dims
    ],
)
def test_chunked_non_contiguous(chunked, make):
    t = make()
    assert not t.is_contiguous() and t.numel() > SMALL_CHUNK
    s = summarize(t, histogram=True)
    _check_against_torch(s, t)
    assert s.preview == tuple(t.flatten()[:8].tolist())  # row-major order, as for a contiguous tensor
    expected = torch.histc(t.contiguous(), bins=HISTOGRAM_BINS, min=s.min, max=s.max)
    assert s.histogram == tuple(int(c) for c in expected.tolist())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.complex64])
def test_chunked_other_dtypes_convert_a_chunk_at_a_time(chunked, dtype):
    torch.manual_seed(0)
    if dtype == torch.int32:
        t = torch.randint(-100, 100, (1_500_000,), dtype=dtype)
    else:
        t = torch.randn(1_500_000, dtype=dtype)
    s = summarize(t, histogram=True)
    assert s.dtype == str(dtype).removeprefix("torch.")
    _check_against_torch(s, t)
    assert len(s.preview) == 8


def test_chunked_nonfinite(chunked):
    torch.manual_seed(0)
    t = torch.randn(2_000_000)
    t[17], t[1_000_003], t[-1] = NAN, INF, -INF
    s = summarize(t, histogram=True)
    _check_against_torch(s, t)
    assert s.nonfinite == 3
    finite = t[torch.isfinite(t)]
    expected = torch.histc(finite, bins=HISTOGRAM_BINS, min=finite.min().item(), max=finite.max().item())
    assert s.histogram == tuple(int(c) for c in expected.tolist())
    assert math.isnan(s.min) or s.min == -INF  # as aminmax reports it
    light = summarize(t, light=True)
    assert light.nonfinite == 3 and light.min is None


def test_chunked_nothing_finite_and_all_equal(chunked):
    s = summarize(torch.full((SMALL_CHUNK * 3,), NAN), histogram=True)
    assert s.nonfinite == SMALL_CHUNK * 3 and s.histogram == (0,) * HISTOGRAM_BINS
    s = summarize(torch.full((SMALL_CHUNK * 3 + 1,), 2.5), histogram=True)
    assert (s.min, s.max, s.mean, s.nonfinite) == (2.5, 2.5, 2.5, 0)
    assert s.histogram[HISTOGRAM_BINS // 2] == SMALL_CHUNK * 3 + 1 and sum(s.histogram) == s.numel


def test_chunked_float32_overflow_is_redone_wide(chunked):
    """Finite values whose float32 sum and norm overflow: mean and norm stay finite, and the
    histogram's range (beyond float32's max) still counts every value."""
    t = torch.full((SMALL_CHUNK * 2 + 3,), 3e38)
    t[::2] = -3e38
    s = summarize(t, histogram=True)
    assert s.nonfinite == 0
    assert s.norm == pytest.approx(3e38 * math.sqrt(t.numel()), rel=1e-6)
    assert s.mean == pytest.approx(t.double().mean().item(), rel=1e-6, abs=1e30)
    assert sum(s.histogram) == t.numel() and s.histogram[0] > 0 and s.histogram[-1] > 0
    light = summarize(t, light=True)
    assert light.nonfinite == 0 and light.norm == pytest.approx(s.norm, rel=1e-6)


def test_chunked_norm_is_more_accurate_than_one_float32_reduction(chunked):
    """Partial norms combined in float64 stay within float32's precision of the exact norm."""
    torch.manual_seed(0)
    t = torch.rand(4_000_000) + 1
    exact = torch.linalg.vector_norm(t.double()).item()
    assert summarize(t).norm == pytest.approx(exact, rel=1e-6)
    assert summarize(t, light=True).norm == pytest.approx(exact, rel=1e-6)


def test_histc_counts_are_kept_past_float32_precision(monkeypatch):
    """torch.histc counts float32 values in float32, which stops counting at 2**24 per bin;
    the chunked histogram counts in int64. (Cheap to check with a constant tensor whose
    single bin gets everything: expand makes 17M elements out of one.)"""
    from gradtui.engine.stats import summary

    monkeypatch.setattr(summary, "CHUNK", 1 << 22)
    t = torch.tensor([1.0, 2.0]).repeat_interleave(2**24 + 8)
    s = summarize(t, histogram=True)
    assert s.histogram[0] == 2**24 + 8 and s.histogram[-1] == 2**24 + 8


@pytest.mark.parametrize("numel", [10, 1000, (1 << 20) + 7])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_pause_s_stats_carry_the_range_of_the_finite_values(numel, bad):
    """min and max propagate a NaN (an infinity is one of them): beside the non-finite count, a
    pause's statistics (with their histogram) say the finite values' min and max, as torch finds
    them; small, big and chunked tensors alike. Without a non-finite value there is none to give."""
    torch.manual_seed(0)
    t = torch.randn(numel)
    t[numel // 3] = bad
    t[numel // 2] = -bad if bad == float("inf") else bad
    finite = t[torch.isfinite(t)]
    stats = summarize(t, histogram=True)
    assert stats.nonfinite == numel - finite.numel()
    assert stats.finite_range == (finite.min().item(), finite.max().item())
    assert summarize(finite, histogram=True).finite_range is None
    assert summarize(torch.full((numel,), float("nan")), histogram=True).finite_range is None
