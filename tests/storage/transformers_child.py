"""transformers 5 loading a model directory in a fresh, instrumented process, offline, with
its materialisation pool at 4 loader threads (it uses min(4, CPUs): 2 on a 2-core machine).

    python transformers_child.py MODEL_DIR
"""

import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import otel_coldstart  # noqa: E402

otel_coldstart.instrument()


import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.core_model_loading as loading  # noqa: E402

loading.GLOBAL_WORKERS = 4
model = transformers.AutoModel.from_pretrained(sys.argv[1], dtype=torch.float16)
otel_coldstart.ready()
print("PARAMETERS", sum(p.numel() for p in model.parameters()), flush=True)
