"""A Llama-shaped module tree whose parameter names match ``otel_coldstart.demo``'s
generated checkpoints: the model the examples (and tests/frameworks) load into."""

from otel_coldstart.demo import LlamaShape


def build_model(shape: LlamaShape):
    """A module tree whose parameter names match the checkpoint's (Llama's layout)."""
    import torch
    from torch import nn

    class Norm(nn.Module):
        def __init__(self, hidden: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

    def linear(n_in: int, n_out: int) -> nn.Linear:
        return nn.Linear(n_in, n_out, bias=False)

    model = nn.Module()
    model.model = nn.Module()
    model.model.embed_tokens = nn.Embedding(shape.vocab, shape.hidden)
    layers = nn.ModuleList()
    for _ in range(shape.layers):
        layer = nn.Module()
        layer.self_attn = nn.Module()
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(layer.self_attn, proj, linear(shape.hidden, shape.hidden))
        layer.mlp = nn.Module()
        layer.mlp.gate_proj = linear(shape.hidden, shape.intermediate)
        layer.mlp.up_proj = linear(shape.hidden, shape.intermediate)
        layer.mlp.down_proj = linear(shape.intermediate, shape.hidden)
        layer.input_layernorm = Norm(shape.hidden)
        layer.post_attention_layernorm = Norm(shape.hidden)
        layers.append(layer)
    model.model.layers = layers
    model.model.norm = Norm(shape.hidden)
    model.lm_head = linear(shape.hidden, shape.vocab)
    return model
