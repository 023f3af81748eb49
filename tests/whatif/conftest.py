"""The what-if tests share the analyzer tests' record builders and browser helpers."""

import os
import sys

_ANALYZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "analyze")
if _ANALYZE not in sys.path:
    sys.path.insert(0, _ANALYZE)
