"""bench/training/kernels.py: which of torch's CPU kernel sets a machine can be timed with."""

from __future__ import annotations

from tests.conftest import bench_script


def test_a_machine_times_its_own_kernels_first_then_every_narrower_set() -> None:
    kernels = bench_script("kernels")
    assert kernels.kernel_sets("AVX512") == ["AVX512", "AVX2", "DEFAULT"]
    assert kernels.kernel_sets("AVX2") == ["AVX2", "DEFAULT"]
    assert kernels.kernel_sets("DEFAULT") == ["DEFAULT"]
    assert kernels.kernel_sets("ZVECTOR") == ["ZVECTOR"]  # another architecture: its own only
