"""Cost of the contact engines (docs/simulation-contact.md, "Cost"):
``PYTHONPATH=. python -m bench.contact_cost``.

1. mj_step alone (block in the box, box on the mat; block on the mat);
2. physics.step() per call while a SimArm at time scale 1 and 20 picks and places, the physics
   thread at 100 Hz as in the daemon (Workcell.start_physics), per engine;
3. render("top"/"side") per engine with the scene at rest (static layer cached) and forced
   re-render of the static layer (a moving block invalidates it every frame).
"""

import statistics
import time

import mujoco

from mecharm.common.kinematics import fk_tip
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.contact import CONTACT_PROFILES
from mecharm.sim.mujoco_physics import build_mjcf
from mecharm.sim.profile import SimProfile
from mecharm.sim.scene import Pose, SceneLayout
from mecharm.sim.workcell import Workcell

PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)
PLACE = (37.059, 66.65, 2.83, -1.4, -78.04, -29.53)
HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


def up(q: tuple[float, ...]) -> tuple[float, ...]:
    return (q[0], q[1] - 20, *q[2:])


m = mujoco.MjModel.from_xml_string(build_mjcf(CONTACT_PROFILES["rig"]))
d = mujoco.MjData(m)
qb = m.joint("block").qposadr[0]
for name, pos in (
    ("block in the box", [0, 0, 0.016]),
    ("block on the mat beside the box", [0.2, 0.2, 0.0125]),
):
    mujoco.mj_resetData(m, d)
    d.qpos[qb : qb + 3] = pos
    for _ in range(500):
        mujoco.mj_step(m, d)
    t = time.perf_counter()
    for _ in range(20000):
        mujoco.mj_step(m, d)
    print(f"mj_step, {name}: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us/step (ncon {d.ncon})")


def cycle(profile: str, scale: float) -> None:
    arm = SimArm(SimArmConfig(time_scale=scale, seed=1, initial_angles=HOME))
    wc = Workcell(arm, "random", seed=3, profile=SimProfile(contact=CONTACT_PROFILES[profile]))
    tx, _, tz = fk_tip(PICK)
    px, _, pz = fk_tip(PLACE)
    wc.next_scene(
        layout=SceneLayout(block=Pose(x=float(tx), z=float(tz)), box=Pose(x=float(px), z=float(pz)))
    )
    costs: list[float] = []
    inner = wc.physics.step

    def timed() -> None:
        a = time.perf_counter()
        inner()
        costs.append(time.perf_counter() - a)

    wc.physics.step = timed  # type: ignore[method-assign]
    steps0 = getattr(wc.physics, "steps_total", 0)
    t0 = arm.sim_time()
    wc.start_physics()
    for kind, v in [
        ("m", up(PICK)),
        ("m", PICK),
        ("c", 0),
        ("m", up(PICK)),
        ("m", up(PLACE)),
        ("m", PLACE),
        ("o", 0),
        ("m", up(PLACE)),
        ("m", HOME),
    ]:
        if kind == "m":
            arm.send_angles(list(v), 60)
        elif kind == "c":
            arm.set_gripper_value(20, 100)
        else:
            arm.set_gripper_state(0, 100)
        time.sleep(0.01)
        arm.wait_idle(timeout=60)
        time.sleep(1.0 / scale)
    sim_s = arm.sim_time() - t0
    tr = wc.truth()
    steps = getattr(wc.physics, "steps_total", 0) - steps0
    c = sorted(costs)
    print(
        f"{profile:5s} x{scale:<3g}: {len(c)} step() calls over {sim_s:.1f} s sim: mean {statistics.mean(c) * 1e3:.2f} ms, "
        f"median {statistics.median(c) * 1e3:.2f}, p95 {c[int(0.95 * len(c))] * 1e3:.2f}, max {c[-1] * 1e3:.1f} ms; "
        f"MuJoCo steps {steps} ({steps * 0.002 / sim_s * 100:.0f}% of sim time stepped); outcome {tr['place_outcome']}"
    )
    wc.close()


for profile in ("ideal", "rig"):
    for scale in (1.0, 20.0):
        cycle(profile, scale)

for profile in ("ideal", "rig"):
    arm = SimArm(SimArmConfig(time_scale=1, seed=1, initial_angles=HOME))
    wc = Workcell(arm, "random", seed=3, profile=SimProfile(contact=CONTACT_PROFILES[profile]))
    out = []
    for cam in ("top", "side"):
        for _ in range(3):
            wc.render(cam)
        t = time.perf_counter()
        for _ in range(20):
            wc.render(cam)
        cached = (time.perf_counter() - t) / 20
        t = time.perf_counter()
        for _ in range(10):
            wc.scene.bump()
            wc.render(cam)
        fresh = (time.perf_counter() - t) / 10
        out.append(f"{cam} {cached * 1e3:.1f} ms (static layer re-drawn: {fresh * 1e3:.1f} ms)")
    print(f"render, {profile}: " + ", ".join(out))
    wc.close()
