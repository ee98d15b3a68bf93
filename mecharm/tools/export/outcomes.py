"""What an exported episode carries besides its recording: the trial's outcome and provenance.

Sources: the ledger row (the runtime task's verdicts and success rule, docs/tasks.md), the
recording's meta (its status) and
the trial's run log (the rig id and the judge). The dataset carries them twice
(docs/lerobot-outcomes.md): per frame (``next.reward``/``next.done``/``next.success`` and
constant ``mecharm.*`` strings, which every lerobot tool keeps) and per episode
(``mecharm/*`` columns of meta/episodes, which lerobot's loader exposes and its merge keeps).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mecharm.common.fsutil import UnsafeNameError
from mecharm.common.layout import DEFAULT_TASK, DataRoot
from mecharm.common.logging import get_logger
from mecharm.common.rigid import is_rig_id, rig_id_from
from mecharm.runtime.config import recorded_constant
from mecharm.runtime.records.outcome import TaskRecords
from mecharm.tools.export.layout import episode_fields

__all__ = ["EpisodeInfo", "default_rig_id", "episode_info", "outcome_columns", "runlog_fields"]

log = get_logger("mecharm.tools.export.outcomes")


@dataclass(frozen=True)
class EpisodeInfo:
    """One episode's per-episode fields (``fields``: layout.episode_fields of the task's
    verdicts, in that order)."""

    run_stem: str
    rig_id: str
    #: the task's verdict columns and their values, in the task's order
    verdicts: tuple[tuple[str, str], ...]
    judge: str
    recording_status: str
    #: a success by the task's rule (pick_place: both verdicts yes; ``--select success``)
    success: bool
    #: the trial's time scale from its run log (the daemon's; 1.0 real time, None unknown):
    #: a trial recorded faster than real time has the arm's path but not its timing
    time_scale: float | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        return episode_fields([k for k, _v in self.verdicts])

    def values(self) -> list[str]:
        """The fields' values, in ``fields`` order."""
        verdicts = dict(self.verdicts)
        return [verdicts[k] if k in verdicts else str(getattr(self, k)) for k in self.fields]

    def verdict(self, name: str) -> str:
        return dict(self.verdicts).get(name, "")

    @property
    def key(self) -> tuple[str, str]:
        """An exported episode's identity: two rigs may both have ``run_0001_...``."""
        return (self.rig_id, self.run_stem)


def default_rig_id(root: Path, setting: str) -> str:
    """The rig id of trials whose run log names none: the setting, else the data root's
    folder name made a valid rig id (mecharm.common.rigid: other characters become '-')."""
    return setting or rig_id_from(Path(root).resolve().name)


def runlog_fields(root: Path, run_stem: str, task: str = DEFAULT_TASK) -> dict[str, str | float]:
    """``rig_id``, ``judge`` and ``time_scale`` from the trial's run log, each only when the
    log has it.

    The judge is the run log's top-level ``judge`` if any, else the judge setting the trial
    ran with (``constants.judge.by``), else the judge of its last judgement. A missing run log
    (trials recorded before run logs, copied recordings) gives nothing; an unreadable one
    or a malformed rig id is logged and ignored, and the caller's fallback applies.
    """
    try:
        path = DataRoot(root, task).runlog(run_stem)
    except UnsafeNameError:
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("runlog_unreadable", path=str(path), reason=str(exc), using="fallback rig id")
        return {}
    if not isinstance(doc, dict):
        log.warning("runlog_unreadable", path=str(path), reason="not a JSON object")
        return {}
    out: dict[str, str | float] = {}
    rig = doc.get("rig_id")
    if is_rig_id(rig):
        out["rig_id"] = rig
    elif rig is not None:
        log.warning("runlog_bad_rig_id", path=str(path), rig_id=repr(rig)[:80], using="fallback")
    constants = doc.get("constants")
    constants = constants if isinstance(constants, dict) else {}
    judgements = doc.get("judgements")
    judgements = (
        [j for j in judgements if isinstance(j, dict)] if isinstance(judgements, list) else []
    )
    scale = recorded_constant(constants, "time_scale")
    if isinstance(scale, int | float) and not isinstance(scale, bool) and scale > 0:
        out["time_scale"] = float(scale)
    for judge in (
        doc.get("judge"),
        recorded_constant(constants, "judge.by"),
        judgements[-1].get("judge") if judgements else None,
    ):
        if isinstance(judge, str) and judge:
            out["judge"] = judge
            break
    return out


def episode_info(
    root: Path,
    run_stem: str,
    row: Mapping[str, str],
    recording_status: str,
    fallback_rig: str,
    records: TaskRecords,
) -> EpisodeInfo:
    """The fields of one trial of the task ``records`` describes, from its ledger ``row``
    and its run log."""
    fields = runlog_fields(root, run_stem, records.task)
    scale = fields.get("time_scale")
    return EpisodeInfo(
        run_stem=run_stem,
        rig_id=str(fields.get("rig_id", fallback_rig)),
        verdicts=tuple((k, row.get(k, "")) for k in records.verdicts),
        judge=str(fields.get("judge", "")),
        recording_status=recording_status,
        success=records.succeeded(row),
        time_scale=float(scale) if scale is not None else None,
    )


def outcome_columns(n: int, success: bool) -> dict[str, np.ndarray]:
    """Per-frame ``next.*`` values of an ``n``-row episode (docs/lerobot-outcomes.md).

    done on the last row only; success and reward 1.0 on the last row of a trial that
    placed, everything else False / 0.0.
    """
    done = np.zeros(n, np.bool_)
    done[-1:] = True
    won = done & success
    return {"next.reward": won.astype(np.float32), "next.done": done, "next.success": won}
