import copy

import pytest
import torch

from ftune.modules.transformer import OutputHead
from ftune.training.features.compile import compile_loss, compile_model
from ftune.training.step.loss import ChunkedCrossEntropyLoss


@pytest.mark.slow
def test_compiled_layers_and_loss_equal_eager(tiny_model, monkeypatch):
    # Inductor's C++ builds dominate (about 20 s of CPU cold, a few seconds from its cache), so the
    # model is compared forward-only (one graph) and the loss forward and backward.
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)  # no worker-pool start-up
    torch._dynamo.reset()
    tokens = torch.tensor([[1, 5, 9, 3, 7, 2, 8, 4]])
    labels = torch.tensor([[5, 9, 3, 7, 2, 8, 4, -100]])
    model = tiny_model(num_layers=1)
    compiled = copy.deepcopy(model)
    compile_model(compiled)
    assert list(compiled.state_dict()) == list(model.state_dict())  # no _orig_mod. prefixes

    with torch.no_grad():
        hidden = model.hidden(tokens)
        torch.testing.assert_close(compiled.hidden(tokens), hidden, rtol=1e-5, atol=1e-5)

    def loss_and_grads(loss_fn):
        w = model.head.weight.detach().clone().requires_grad_()
        h = hidden.clone().requires_grad_()
        loss_sum, n = loss_fn(OutputHead(w, None), h, labels)
        return (loss_sum, n, *torch.autograd.grad(loss_sum, (w, h)))

    eager = loss_and_grads(ChunkedCrossEntropyLoss(num_chunks=2))
    got = loss_and_grads(compile_loss(ChunkedCrossEntropyLoss(num_chunks=2)))
    assert got[1] == eager[1] == 7
    for i in (0, 2, 3):  # loss, grad of weight, grad of hidden
        torch.testing.assert_close(got[i], eager[i], rtol=1e-5, atol=1e-5)


def test_compile_model_needs_layers():
    with pytest.raises(ValueError, match="compile_model needs a model with a `layers` nn.ModuleList"):
        compile_model(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="compile_loss expects an nn.Module loss"):
        compile_loss(lambda w, h, y: (h.sum(), 0))
