"""The analyzer's hand-built records (tests/analyze/analyze_records.py) serve these tests too."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "analyze"))
