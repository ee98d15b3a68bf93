"""``mecharm fk ...``: build/import the table, adopt a changed one, look up poses, adopt arcs,
hole map, clusters, fill.

Exit codes: 0 done (lookup: ok), 1 lookup out_of_range, 2 invalid input (the
message names what was wrong).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mecharm.common.config import load_settings
from mecharm.common.fsutil import atomic_write_json, atomic_write_text
from mecharm.common.layout import FK_DIR, FK_TABLE
from mecharm.common.logging import configure_logging
from mecharm.runtime.lookup.build import build_table, default_rows, ensure_table
from mecharm.runtime.lookup.fk_lookup import METHODS, PHASES, fk_lookup
from mecharm.runtime.lookup.j0 import (
    ARC_POINTS,
    DEFAULT_PLACE_ARC,
    adopt_arc,
    j0_lookup,
    load_arc,
    save_arc,
)
from mecharm.runtime.lookup.settings import FkToolSettings
from mecharm.runtime.lookup.table import (
    ADOPT_MAX_FK_ERROR_MM,
    TableError,
    adopt_table,
    load_table,
    read_csv_rows,
)
from mecharm.tools.fktable.holes import (
    ascii_map,
    cells_csv,
    cluster_seeds,
    fill_table,
    hole_map,
    summarize,
)

__all__ = ["PHASE_BANDS", "register"]

#: Default ee_y band per phase (docs/stages.md, docs/lookup.md): descend to pick, place with the block.
PHASE_BANDS: dict[str, tuple[float, float]] = {
    "pick": (0.010, 0.040),
    "place_withblock": (0.070, 0.100),
    "place_noblock": (0.070, 0.100),
}


def _settings(args: argparse.Namespace) -> FkToolSettings:
    """Flags over environment (MECHARM_FK_*) over --config over defaults."""
    overrides = {
        "data_dir": getattr(args, "data_dir", None),
        "table": getattr(args, "table", None),
        "log_level": getattr(args, "log_level", None),
        "place_arc": getattr(args, "arc", None),
    }
    return load_settings(FkToolSettings, getattr(args, "config", None), overrides)


def _table_path(args: argparse.Namespace) -> Path:
    return _settings(args).table_path


def _add_table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", help="YAML file with data_dir, table, pick_arc, place_arc, log_level"
    )
    p.add_argument(
        "--data-dir",
        help=f"data root; the table is {{data-dir}}/{FK_DIR}/{FK_TABLE} (default $MECHARM_DATA_ROOT, else ~/.local/share/mecharm/data)",
    )
    p.add_argument("--table", help="table CSV path (overrides --data-dir)")
    p.add_argument("--log-level", help="structlog level (default warning)")


def _print(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _cmd_build(args: argparse.Namespace) -> int:
    path = _table_path(args)
    t0 = time.perf_counter()
    rows = read_csv_rows(Path(args.from_csv)) if args.from_csv else default_rows()
    checksum = build_table(path, rows)
    table = load_table(path)  # primes the binary cache
    _print(
        {
            "table": str(path),
            "n_rows": table.n_rows,
            "sha256": checksum,
            "source": args.from_csv or "default lattices + global scan",
            "seconds": round(time.perf_counter() - t0, 2),
        }
    )
    return 0


def _cmd_adopt_table(args: argparse.Namespace) -> int:
    """Validate the table as it is now and record its checksum (docs/lookup.md,
    "Adopting a changed table"); then load it once, which rebuilds the binary cache."""
    settings = _settings(args)
    report = adopt_table(settings.table_path, max_fk_error_mm=args.max_fk_error_mm)
    load_table(settings.table_path, j1_max=settings.j1_max)
    _print(report.to_dict())
    return 0


def _cmd_lookup(args: argparse.Namespace) -> int:
    path = _table_path(args)
    if args.ensure:
        ensure_table(_settings(args).data_dir)
    table = load_table(path, j1_max=_settings(args).j1_max)
    band = PHASE_BANDS.get(args.phase, (None, None))
    y_lo = args.ee_y_min if args.ee_y_min is not None else band[0]
    y_hi = args.ee_y_max if args.ee_y_max is not None else band[1]
    if y_lo is None or y_hi is None:
        raise ValueError(f"--ee-y-min and --ee-y-max are required for phase {args.phase}")
    ref = args.ref_joints
    approach = None
    if args.ref_arc:
        approach = j0_lookup(load_arc(args.ref_arc), (args.x, args.z))
        if not approach.ok:
            raise ValueError(f"--ref-arc: {approach.reason}")
        ref = list(approach.angles)
    res = fk_lookup(
        table,
        args.phase,
        (args.x, args.z),
        y_lo,
        y_hi,
        dist_max=args.dist_max,
        j3_ref=args.j3_ref,
        j5_ref=args.j5_ref,
        band_deg=args.band_deg,
        ref_joints=ref,
        joint_tol=args.joint_tol,
        ee_y_floor=args.ee_y_floor,
        method=args.method,
    )
    out = res.to_dict()
    if approach is not None:
        out["approach"] = approach.to_dict()
    _print(out)
    return 0 if res.ok else 1


def _cmd_adopt(args: argparse.Namespace) -> int:
    arc = adopt_arc(
        args.name,
        args.phase,
        args.base,
        (args.x_range[0], args.x_range[1]),
        args.z,
        n_points=args.points,
    )
    save_arc(Path(args.out), arc)
    _print({"written": args.out, **arc.to_dict()})
    return 0


def _map(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    settings = _settings(args)
    table = load_table(settings.table_path, j1_max=settings.j1_max)
    arc = load_arc(settings.place_arc)
    t0 = time.perf_counter()
    cells = hole_map(table, arc)
    return table, cells, time.perf_counter() - t0


def _cmd_holes(args: argparse.Namespace) -> int:
    table, cells, secs = _map(args)
    text = ascii_map(cells)
    if args.out_dir:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "hole_map.csv", cells_csv(cells))
        atomic_write_text(out / "hole_map.txt", text)
    sys.stdout.write(text)
    _print({"table_sha256": table.checksum, **summarize(cells), "seconds": round(secs, 3)})
    return 0


def _clusters_doc(table: Any, cells: Any) -> dict[str, Any]:
    clusters = cluster_seeds(table, cells)
    return {
        "table_sha256": table.checksum,
        **summarize(cells, clusters),
        "clusters_detail": [
            {
                "label": c.label,
                "base": list(c.base),
                "n_seeds": len(c.members),
                "diameter_deg": round(c.diameter, 3),
                "seed_rows": list(c.members),
            }
            for c in clusters
        ],
    }


def _cmd_clusters(args: argparse.Namespace) -> int:
    table, cells, _ = _map(args)
    doc = _clusters_doc(table, cells)
    if args.out:
        atomic_write_json(Path(args.out), doc)
    _print(doc)
    return 0


def _cmd_fill(args: argparse.Namespace) -> int:
    from mecharm.tools.fktable.holes import Cluster

    path = _table_path(args)
    table, cells, _ = _map(args)
    if args.clusters:
        doc = json.loads(Path(args.clusters).read_text(encoding="utf-8"))
        try:
            expect = str(doc["table_sha256"])
            clusters = [
                Cluster(
                    int(c["label"]),
                    tuple(float(v) for v in c["base"]),
                    tuple(c["seed_rows"]),
                    float(c["diameter_deg"]),
                )
                for c in doc["clusters_detail"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"--clusters {args.clusters}: not a clusters file ({exc})") from None
    else:
        expect, clusters = table.checksum, cluster_seeds(table, cells)
    before = summarize(cells, clusters)
    merged = fill_table(path, clusters, expect_checksum=expect)
    table2 = load_table(path, j1_max=_settings(args).j1_max)
    cells2 = hole_map(table2, load_arc(_settings(args).place_arc))
    after = summarize(cells2, cluster_seeds(table2, cells2))
    sys.stdout.write(ascii_map(cells2))
    _print({"before": before, "after": after, **merged})
    return 0


def _guard(func: Any) -> Any:
    """Turn input errors into exit code 2 with the message on stderr."""

    def run(args: argparse.Namespace) -> int:
        try:
            configure_logging(_settings(args).log_level)
            return int(func(args))
        except (ValueError, TableError, OSError) as exc:
            sys.stderr.write(f"mecharm fk {args.fk_command}: error: {exc}\n")
            return 2

    return run


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``fk`` sub-commands to ``parser`` (the ``mecharm fk`` group)."""
    sub = parser.add_subparsers(dest="fk_command", required=True)

    p = sub.add_parser(
        "build", help="build the default table (or import the rig's CSV) under the fixed name"
    )
    _add_table_args(p)
    p.add_argument(
        "--from-csv", help="import this table CSV (ee_x,ee_y,ee_z,j0..j5) instead of building"
    )
    p.set_defaults(func=_guard(_cmd_build))

    p = sub.add_parser(
        "adopt",
        help="accept a table changed after build/import: validate it, record its new checksum",
    )
    _add_table_args(p)
    p.add_argument(
        "--max-fk-error-mm",
        type=float,
        default=ADOPT_MAX_FK_ERROR_MM,
        help="largest row tip vs kinematic-model tip distance accepted "
        f"(default {ADOPT_MAX_FK_ERROR_MM:g} mm)",
    )
    p.set_defaults(func=_guard(_cmd_adopt_table))

    p = sub.add_parser("lookup", help="fk_lookup for one target, printed as JSON")
    _add_table_args(p)
    p.add_argument(
        "--ensure", action="store_true", help="build the default table first if it is missing"
    )
    p.add_argument("--phase", required=True, choices=PHASES)
    p.add_argument("--x", type=float, required=True, help="target x (m, Unity frame)")
    p.add_argument("--z", type=float, required=True, help="target z (m, Unity frame)")
    p.add_argument(
        "--ee-y-min", type=float, help="band lower bound (m, inclusive); default per phase"
    )
    p.add_argument(
        "--ee-y-max", type=float, help="band upper bound (m, exclusive); default per phase"
    )
    p.add_argument("--dist-max", type=float, default=0.030)
    p.add_argument("--j3-ref", type=float)
    p.add_argument("--j5-ref", type=float)
    p.add_argument("--band-deg", type=float, default=5.0)
    p.add_argument("--ref-joints", type=float, nargs=6, metavar="J")
    p.add_argument(
        "--ref-arc", help="use the approach pose from this arc file at the target as ref_joints"
    )
    p.add_argument("--joint-tol", type=float)
    p.add_argument("--ee-y-floor", type=float)
    p.add_argument("--method", choices=METHODS, default="indexed")
    p.set_defaults(func=_guard(_cmd_lookup))

    p = sub.add_parser("adopt-arc", help="generate an adopted pose file from the kinematic model")
    p.add_argument("--name", required=True)
    p.add_argument("--phase", required=True, choices=PHASES)
    p.add_argument("--base", type=float, nargs=5, required=True, metavar="J", help="j1..j5")
    p.add_argument("--x-range", type=float, nargs=2, required=True, metavar=("X0", "X1"))
    p.add_argument("--z", type=float, required=True, help="depth of the arc's points (m)")
    p.add_argument("--points", type=int, default=ARC_POINTS)
    p.add_argument("--out", required=True)
    p.add_argument("--log-level", help="structlog level (default warning)")
    p.set_defaults(func=_guard(_cmd_adopt))

    for name, func, help_text in (
        ("holes", _cmd_holes, "hole map of the PLACE grid (CSV + ASCII); read-only"),
        ("clusters", _cmd_clusters, "seed clusters of the hole map: the base poses to scan next"),
        (
            "fill",
            _cmd_fill,
            "scan lattices around the cluster bases, merge into the table, map again",
        ),
    ):
        p = sub.add_parser(name, help=help_text)
        _add_table_args(p)
        p.add_argument("--arc", help=f"approach_place pose file (default {DEFAULT_PLACE_ARC})")
        if name == "holes":
            p.add_argument("--out-dir", help="write hole_map.csv and hole_map.txt here")
        if name == "clusters":
            p.add_argument("--out", help="write the clusters JSON here (input of fill --clusters)")
        if name == "fill":
            p.add_argument("--clusters", help="clusters JSON from `mecharm fk clusters --out`")
        p.set_defaults(func=_guard(func))
