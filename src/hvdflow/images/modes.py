"""udocker's execution modes as hvdflow names them: the standard library only, so that the mode chooser each rank
starts (:mod:`hvdflow.images.execmode_choice`) imports little."""

EXECMODES = ("P1", "P2", "R1")
"""udocker's modes hvdflow runs: proot (P1, P2) and rootless runc (R1, through :mod:`hvdflow.runtime.udocker.launcher`);
R2/R3 run no faster than P1 here and the F modes need udocker's own patchelf (docs/research/udocker-r1-2026-11-27.md)."""
RUNC_MODES = ("R1",)
AUTO_MODE = "auto"
"""A profile's ``execmode: auto``: R1 on each node that can run it (:mod:`hvdflow.images.execmode_choice`), else P1."""
AUTO_RUNC_MODE, AUTO_FALLBACK_MODE = "R1", "P1"
"""The two modes ``auto`` chooses between: runc's rootless mode, and the proot mode every node can run."""
PROFILE_EXECMODES = (*EXECMODES, AUTO_MODE)
"""What a profile's ``execmode`` may say."""
