"""A non-finite gradient leaves the weights and the optimizer state bit-identical."""

from __future__ import annotations

import copy

import pytest
import torch

from trainer.finite_step import FiniteStepAdamW, gradient_norm


def model_and_optimizer() -> tuple[torch.nn.Module, FiniteStepAdamW]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, FiniteStepAdamW(model.parameters(), lr=0.1, weight_decay=0.01)


def step(model: torch.nn.Module, opt: FiniteStepAdamW, scale: float) -> None:
    opt.zero_grad()
    (model(torch.ones(3, 4)).sum() * scale).backward()
    opt.step()


def snapshot(model: torch.nn.Module, opt: FiniteStepAdamW) -> tuple[list, dict]:
    return [p.detach().clone() for p in model.parameters()], copy.deepcopy(opt.state_dict())


def assert_identical(a: tuple[list, dict], b: tuple[list, dict]) -> None:
    for x, y in zip(a[0], b[0], strict=True):
        assert torch.equal(x, y)
    assert a[1]["state"].keys() == b[1]["state"].keys()
    for k, state in a[1]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, b[1]["state"][k][name]), (k, name)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_gradient_is_refused_and_changes_nothing(scale):
    model, opt = model_and_optimizer()
    step(model, opt, 1.0)  # moments exist now
    assert not opt.overflow
    before = snapshot(model, opt)
    step(model, opt, scale)
    assert opt.overflow
    assert_identical(before, snapshot(model, opt))


def test_a_finite_gradient_after_a_refused_one_steps_normally():
    model, opt = model_and_optimizer()
    reference, ref_opt = model_and_optimizer()
    step(model, opt, float("nan"))
    assert opt.overflow and not opt.state  # not even the step counter moved
    step(model, opt, 1.0)
    step(reference, ref_opt, 1.0)
    assert not opt.overflow
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p, q)


def test_gradient_norm_is_the_norm_of_all_gradients_together():
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)
    assert gradient_norm([a, b]) == 0.0  # no gradients yet
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert gradient_norm([a, b]) == pytest.approx(5.0)
    b.grad = torch.tensor([float("nan")])
    assert gradient_norm([a, b]) != gradient_norm([a, b])  # nan
