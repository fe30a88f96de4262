"""``run_python``: model-written NumPy / SciPy / pandas code on the task's fitting data, in the sandbox.

The code runs in a confined child process (:mod:`harness.tools.sandbox`): it sees ``df`` (a pandas DataFrame of
the train + validation rows: the inputs and the target, by name), ``np``, ``pd`` and ``DATA_DIR``; it prints what
it wants the model to read. Test rows are never given to it. The isolation is strict (Landlock + seccomp +
limits) and the tool refuses where the kernel cannot provide it, unless ``HARNESS_SR_SANDBOX=process`` opts into
the weaker process-only mode (every result says which one ran).
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from harness.tools.base import TOOLS, BaseTool, bound_text
from harness.tools.sandbox import SandboxLimits, run_sandboxed

__all__ = ["RunPythonTool", "sandbox_mode", "SANDBOX_ENV"]

SANDBOX_ENV = "HARNESS_SR_SANDBOX"
TEXT_LIMIT = 3000
PREAMBLE = "import numpy as np\nimport pandas as pd\ndf = pd.read_csv(DATA_DIR + '/data.csv')\n"


def sandbox_mode() -> str:
    """``strict`` unless the user opted into ``process`` (environment variable ``HARNESS_SR_SANDBOX``)."""
    mode = os.environ.get(SANDBOX_ENV, "strict").strip().lower() or "strict"
    if mode not in ("strict", "process"):
        raise ValueError(f"{SANDBOX_ENV}={mode!r}: use 'strict' (the default) or 'process' (weaker: no file or "
                         "network confinement)")
    return mode


class CodeFailed(RuntimeError):
    """The code ran and failed (an exception, a limit, a refused system call): the message says which."""


def _data_csv(context: Any) -> bytes:
    import pandas as pd

    names = list(context.task.input_names)
    X = np.vstack([context.train.X, context.valid.X])
    y = np.concatenate([context.train.y, context.valid.y])
    frame = pd.DataFrame(X, columns=names)
    frame[context.task.target_name] = y
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False, float_format="%.17g")
    return buffer.getvalue().encode()


@TOOLS.register
class RunPythonTool(BaseTool):
    name = "run_python"
    result_str_limit = TEXT_LIMIT
    limits = SandboxLimits()
    max_code_chars = 4000  # a grammar-constrained local model is held to its own cap (GRAMMAR_MAX_STRING)

    @classmethod
    def tool_parameters(cls) -> dict:
        schema = super().tool_parameters()
        schema["properties"]["code"]["maxLength"] = cls.max_code_chars
        return schema

    def execute(self, code: str) -> dict:
        """Run Python (NumPy, SciPy, pandas) on the fitting data in an isolated process and return what it prints.

        Args:
            code: Python source. `df` is a pandas DataFrame of the fitting rows (columns: the inputs and the
                target, by name; also the file data.csv); `np` and `pd` are imported. Print the numbers you want to see. No network, no
                files outside the working folder, no subprocesses; 30 s wall, 20 s CPU, 2 GB memory.
        """
        result = run_sandboxed(code, data={"data.csv": _data_csv(self.context)}, limits=self.limits,
                               mode=sandbox_mode(), preamble=PREAMBLE)
        if not result.ok:
            tail = f"\nstdout before it failed:\n{result.stdout[:800]}" if result.stdout.strip() else ""
            raise CodeFailed(f"{result.error} [{result.isolation}]{tail}")
        return result.to_dict()

    def format_result(self, result: dict) -> str:
        text = result["stdout"].strip() or "(the code printed nothing: print what you want to see)"
        if "NOT confined" in result["isolation"]:
            text += f"\n[sandbox: {result['isolation']}]"
        return bound_text(text, TEXT_LIMIT)
