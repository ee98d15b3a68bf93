"""HTTP MJPEG cameras as LeRobot cameras (``type: mjpeg_http``).

lerobot's ``OpenCVCamera`` cannot read the rig's HTTP cameras (the URL is taken for a
path, and setting the width fails on a stream), so any lerobot robot or tool that names
one of them uses this camera: ``mecharm.cameras.mjpeg_http.MjpegHttpCamera``'s reader
thread (newest frame only, a broken stream is an error at once), decoded, resized to the
configured size and in the configured colour order (docs/lerobot-robot.md).
"""

from lerobot_camera_mecharm.camera_mjpeg import MjpegHttp
from lerobot_camera_mecharm.config_mjpeg import MjpegHttpConfig

__all__ = ["MjpegHttp", "MjpegHttpConfig"]
