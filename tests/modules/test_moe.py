"""MoE building blocks: the router against transformers', the expert backends against each other and
against a per-token reference, the load-balancing loss against transformers' function, errors."""

import pytest
import torch
import torch.nn.functional as F

from ftune.models.qwen3_moe import qwen3_moe_tiny
from ftune.modules.moe import MoEFeedForward
from ftune.modules.moe_experts import GroupedExperts, sort_by_expert
from ftune.modules.moe_router import TopKRouter, load_balancing_loss

pytestmark = pytest.mark.usefixtures("one_thread")


def _experts(backend: str) -> GroupedExperts:
    torch.manual_seed(0)
    return GroupedExperts(num_experts=6, embed_dim=16, hidden_dim=8, backend=backend)


def _routing(tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, 16, generator=gen)
    # Experts 0..3 only: 4 and 5 get no token (empty groups must work, with zero gradient).
    weights, indices = torch.randn(tokens, 4, generator=gen).softmax(-1).topk(2, dim=-1)
    return x, indices, weights


def _per_token(experts: GroupedExperts, x, indices, weights) -> torch.Tensor:
    """The definition, one token and one choice at a time."""
    rows = []
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1])
        for e, w in zip(indices[t].tolist(), weights[t], strict=True):
            gate, up = (experts.gate_up_proj[e] @ x[t]).chunk(2)
            acc = acc + w * (experts.down_proj[e] @ (F.silu(gate) * up))
        rows.append(acc)
    return torch.stack(rows)


@pytest.mark.parametrize("backend", ["grouped_mm", "loop"])
def test_experts_equal_the_per_token_definition(backend: str) -> None:
    experts = _experts(backend)
    x, indices, weights = _routing(24)
    got = experts(x, indices, weights)
    with torch.no_grad():
        expected = _per_token(experts, x, indices, weights)
    assert (got - expected).abs().max().item() <= 1e-6


def test_backends_give_the_same_outputs_and_gradients() -> None:
    results = []
    for backend in ("grouped_mm", "loop"):
        experts = _experts(backend)
        x, indices, weights = _routing(40)
        x.requires_grad_()
        experts(x, indices, weights).backward(torch.ones(40, 16))  # an expanded (stride-0) gradient
        results.append((x.grad, experts.gate_up_proj.grad, experts.down_proj.grad))
    for a, b in zip(*results, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert results[0][1][4:].abs().sum() == 0  # experts without tokens: zero gradient


def test_sort_by_expert_groups_rows_contiguously() -> None:
    indices = torch.tensor([[2, 0], [0, 1], [2, 1]])
    groups = sort_by_expert(indices, 4)
    assert groups.offsets.tolist() == [2, 4, 6, 6]
    assert groups.token.tolist() == [0, 1, 1, 2, 0, 2]  # expert 0: tokens 0, 1; 1: 1, 2; 2: 0, 2
    assert indices.reshape(-1)[groups.order].tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("norm", [True, False])
def test_router_matches_transformers(norm: bool) -> None:
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    config = Qwen3MoeConfig(hidden_size=16, num_experts=6, num_experts_per_tok=3, norm_topk_prob=norm)
    theirs = Qwen3MoeTopKRouter(config)
    ours = TopKRouter(embed_dim=16, num_experts=6, top_k=3, norm_topk_prob=norm)
    with torch.no_grad():
        theirs.weight.normal_()
        ours.weight.copy_(theirs.weight)
    x = torch.randn(30, 16, generator=torch.Generator().manual_seed(1))
    logits, weights, indices = theirs(x)
    got = ours(x)
    assert torch.equal(got.indices, indices) and torch.equal(got.logits, logits)
    assert (got.weights - weights).abs().max().item() <= 1e-7
    assert torch.allclose(got.weights.sum(-1), torch.ones(30)) == norm


def test_load_balancing_loss_matches_transformers() -> None:
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    gen = torch.Generator().manual_seed(2)
    logits = [torch.randn(2 * 20, 6, generator=gen) * 2 for _ in range(3)]
    mask = torch.ones(2, 20)
    mask[0, 12:] = 0
    for m in (None, mask):
        expected = load_balancing_loss_func(tuple(logits), 6, 2, m)
        assert load_balancing_loss(logits, num_experts=6, top_k=2, mask=m).item() == pytest.approx(
            expected.item(), abs=1e-6
        )
    # Uniform probabilities: num_experts * sum_e f_e / num_experts = the sum of the shares = top_k.
    assert load_balancing_loss([torch.zeros(40, 6)], num_experts=6, top_k=2).item() == pytest.approx(2.0)


def test_errors_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match=r"top_k must be in \[1, num_experts=4\], got 5"):
        TopKRouter(embed_dim=8, num_experts=4, top_k=5, norm_topk_prob=True)
    with pytest.raises(ValueError, match="backend must be one of .*got 'einsum'"):
        GroupedExperts(num_experts=2, embed_dim=4, hidden_dim=4, backend="einsum")
    with pytest.raises(ValueError, match="no router logits; run a forward"):
        load_balancing_loss([], num_experts=4, top_k=2)
    model = qwen3_moe_tiny()
    with pytest.raises(ValueError, match="no router logits yet; call the model on a batch first"):
        model.aux_loss()
    model(torch.tensor([[1, 2, 3]]))
    assert [t.shape for t in model.router_logits()] == [(3, 8), (3, 8)]
    assert isinstance(model.layers[0].mlp, MoEFeedForward) and model.aux_loss_coef == 0.001


def test_compiled_layers_trace_the_grouped_products() -> None:
    # torch._grouped_mm's own fake kernel takes bf16 only; ftune's custom ops let torch.compile trace
    # the fp32 model (aot_eager: the traced graphs run as eager ops, no C++ compile in the test).
    tokens = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(3))
    grads = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = qwen3_moe_tiny()
        if compiled:
            for layer in model.layers:
                layer.compile(backend="aot_eager", fullgraph=True)
        logits = model(tokens)
        (logits.square().mean() + model.aux_loss()).backward()
        grads.append((logits.detach(), model.layers[0].mlp.experts.gate_up_proj.grad))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-6)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-7)
