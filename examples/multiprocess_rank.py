"""One rank of a 2-process (or N-process) torch.distributed start on CPU (gloo).

Started by ``examples/multiprocess_launch.py`` (or any launcher that sets ``TRACEPARENT``):

    python examples/multiprocess_rank.py CHECKPOINT_DIR RANK WORLD_SIZE INIT_METHOD
    torchrun --standalone --nproc-per-node 2 examples/multiprocess_rank.py CHECKPOINT_DIR

Each rank reads its share of the checkpoint's shards, casts them to fp16, joins the process
group and checks with an all-reduce that every rank loaded its part. Its ``model.startup``
is a child of the launcher's span (``TRACEPARENT``) and carries ``coldstart.rank``/
``coldstart.world_size`` from torch.distributed.
"""

import otel_coldstart

otel_coldstart.instrument()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main(directory: str, rank: int, world_size: int, init_method: str) -> int:
    with otel_coldstart.phase("import_libraries"):
        import torch
        import torch.distributed as dist
        from safetensors.torch import load_file

    with otel_coldstart.phase("init_process_group"):
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    with open(os.path.join(directory, "model.safetensors.index.json"), encoding="utf-8") as handle:
        shards = sorted(set(json.load(handle)["weight_map"].values()))
    mine = shards[rank::world_size]
    weights = {}
    for name in mine:
        for key, tensor in load_file(os.path.join(directory, name)).items():
            weights[key] = tensor.to(torch.float16)
    loaded = torch.tensor([sum(t.numel() for t in weights.values())], dtype=torch.float64)
    dist.all_reduce(loaded)  # every rank learns the whole model's size: all parts arrived
    dist.barrier()
    otel_coldstart.ready()
    print(json.dumps({"rank": rank, "shards": mine, "parameters_all_ranks": int(loaded.item())}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2:  # under torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT are in the environment
        sys.exit(main(sys.argv[1], int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://"))
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
