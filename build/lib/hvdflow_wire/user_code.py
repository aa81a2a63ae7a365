"""The line a trainer process ends with when the user's own code fails (written by ``hvdflow_trainer.user_code``,
read by the host's steps): the error in the user's terms, which the host raises instead of a rank's log tail."""

from __future__ import annotations

from typing import Optional

USER_CODE_ERROR = "hvdflow: error in your model code: "
"""How the line starts."""

USER_CODE_WARNING = "hvdflow: warning: "
"""How a line starts that warns of the user's code without failing it (the model check's unresumable random ops);
the host copies such lines into the rule's log."""

USER_CODE_EXIT = 3
"""The process's exit status after that line."""


def user_code_error(log_text: str) -> Optional[str]:
    """The last user-code error a log holds (without the prefix), or None."""
    found = None
    for line in log_text.splitlines():
        if line.startswith(USER_CODE_ERROR):
            found = line[len(USER_CODE_ERROR):]
    return found
