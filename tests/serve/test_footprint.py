"""What ``--instances`` is checked against: the memory a load takes, what is free, and a budget shared by models."""

from __future__ import annotations

import pytest

from trtpipe.serve.batching.footprint import InstancesDoNotFit, MemoryBudget, UsageMeter, free_mib
from trtpipe.vocab import Device

BLOCK_MIB = 64


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_host_meter_sees_what_a_load_takes() -> None:
    import numpy as np

    with UsageMeter(Device.CPU) as meter:
        block = np.ones(BLOCK_MIB << 20, np.uint8)  # written, so resident
        taken = meter.read()
    assert block.sum() == BLOCK_MIB << 20
    assert taken is not None and taken >= BLOCK_MIB * 0.95
    free = free_mib(Device.CPU)
    assert free is not None and free > 0


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch")
def test_the_device_meter_sees_what_a_load_takes() -> None:
    import torch

    before = free_mib(Device.CUDA)
    with UsageMeter(Device.CUDA) as meter:
        block = torch.ones(BLOCK_MIB << 20, dtype=torch.uint8, device="cuda")
        taken = meter.read()
    assert int(block.sum()) == BLOCK_MIB << 20
    assert taken is not None and taken >= BLOCK_MIB * 0.95
    assert before is not None and free_mib(Device.CUDA) <= before - BLOCK_MIB * 0.95  # type: ignore[operator]


def test_a_budget_is_shared_by_every_model_of_the_server() -> None:
    budget = MemoryBudget(limit_mib=100)
    budget.check("a version 1", 2, 30.0, free=10_000.0, device=Device.CPU)  # 60 of 100 MiB
    with pytest.raises(InstancesDoNotFit) as refused:
        budget.check("b version 1", 2, 30.0, free=10_000.0, device=Device.CPU)
    assert str(refused.value) == (
        "b version 1: --instances 2 needs ~60 MiB of host memory (30 MiB each, measured after loading and a warm-up "
        "run); 1 fit in the --memory-budget-mb 100 MiB, 60 MiB of it taken by other models: use --instances 1.")
    with pytest.raises(InstancesDoNotFit) as refused:  # less free than the budget: what is free decides
        MemoryBudget(limit_mib=100).check("c version 1", 4, 30.0, free=50.0, device=Device.CUDA)
    assert "; 2 fit in the 80 MiB of device memory free: use --instances 2." in str(refused.value)
