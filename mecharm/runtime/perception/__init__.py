"""The runtime's eyes: top-camera homography, block/box detection, tip measurement, judges.

Pure functions over BGR numpy frames (no camera I/O): the runtime grabs frames
through ``mecharm.cameras.open_camera`` and passes them in. See docs/perception.md.
"""

from __future__ import annotations

from mecharm.runtime.perception.config import DEFAULT_CONFIG, MarkerSpec, PerceptionConfig
from mecharm.runtime.perception.detect import (
    BOX_FALLBACK_XZ,
    BOX_MAX_SPREAD_MM,
    BOX_SCORE_THRESH,
    BOX_TEMPLATE_BLOB_MM,
    combine_detections,
    detect_block,
    detect_box,
    detect_scene,
    locate_block,
    red_counts,
    refind_box,
)
from mecharm.runtime.perception.homography import (
    HomographyError,
    MatHomography,
    estimate_homography,
)
from mecharm.runtime.perception.judge import (
    GeometricJudge,
    HumanJudge,
    Judge,
    JudgeEvidence,
    VlmClient,
    VlmJudge,
    make_judge,
)
from mecharm.runtime.perception.results import (
    BlockDetection,
    BoxDetection,
    SceneDetection,
    TipMeasurement,
    Verdict,
)
from mecharm.runtime.perception.tip import measure_tip

__all__ = [
    "BOX_FALLBACK_XZ",
    "BOX_MAX_SPREAD_MM",
    "BOX_SCORE_THRESH",
    "BOX_TEMPLATE_BLOB_MM",
    "DEFAULT_CONFIG",
    "BlockDetection",
    "BoxDetection",
    "GeometricJudge",
    "HomographyError",
    "HumanJudge",
    "Judge",
    "JudgeEvidence",
    "MarkerSpec",
    "MatHomography",
    "PerceptionConfig",
    "SceneDetection",
    "TipMeasurement",
    "Verdict",
    "VlmClient",
    "VlmJudge",
    "combine_detections",
    "detect_block",
    "detect_box",
    "detect_scene",
    "estimate_homography",
    "locate_block",
    "make_judge",
    "measure_tip",
    "red_counts",
    "refind_box",
]
