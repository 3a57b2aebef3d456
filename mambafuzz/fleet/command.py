"""What the CLI asks of the fleet: its arguments, joining a campaign, the box's lines, `collect`.

The CLI stays parse-and-print: ``fuzz --fleet`` calls ``setup`` (a campaign
joined, or one line and exit 2 for a bad URL, a hub that does not answer or a
campaign that runs other targets) and hands the ``Fleet`` to the runner;
``after`` keeps the reports of the targets this box fuzzed and says what the
campaign looks like; ``collect`` is ``collect.collect``.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from mambafuzz.errors import UsageError
from mambafuzz.fleet import box, buckets, hub
from mambafuzz.fleet.hub import HubDown, Keys
from mambafuzz.fleet.outbox import Outbox
from mambafuzz.fleet.worker import FINAL_FLUSH, Fleet

DEFAULT_TTL = 60.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number (0 or more), got {text!r}")
    return int(text)


def add_fuzz_arguments(p) -> None:
    g = p.add_argument_group("campaign across boxes (--fleet)")
    g.add_argument("--fleet", metavar="redis://HOST:PORT/DB", default=None,
                   help="make this box one worker of a campaign whose hub is this Redis: targets are leased "
                        "from it, findings pushed to it (and kept in --crashes-dir first), the corpus shared")
    g.add_argument("--campaign", metavar="NAME", default=None,
                   help="the campaign's name (None: a digest of the targets and options, so that the same "
                        "command on every box joins the same campaign)")
    g.add_argument("--box", metavar="NAME", default=None,
                   help="this box's name in the campaign (None: $MAMBAFUZZ_BOX, else the host name and any "
                        "Slurm array task id)")
    g.add_argument("--lease-ttl", type=_seconds, default=DEFAULT_TTL, metavar="SECONDS",
                   help="a target lease lapses this long after its worker last renewed it (every third of it): "
                        "how soon a dead box's targets go to others")
    g.add_argument("--workers-per-target", type=_count, default=0, metavar="N",
                   help="at most N workers fuzz one target at once (0: a worker with no free target joins the "
                        "one with fewest workers, so none idles while a target is open)")


def add_collect_arguments(p) -> None:
    p.add_argument("hub", metavar="redis://HOST:PORT/DB", help="the campaign's hub")
    p.add_argument("--campaign", metavar="NAME", default=None, help="which campaign (None: the only one there)")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="the folder for the crash files and the summary (None: campaign-NAME)")
    p.add_argument("--from", dest="from_dirs", type=Path, action="append", default=[], metavar="DIR",
                   help="first send the findings a box's crash folder still holds for the hub (repeatable)")
    p.add_argument("--unconfirmed", action="store_true",
                   help="also write the buckets no replay has confirmed yet (their files say so)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON document")


def _spec(targets: list[dict], opts) -> dict:
    return {"targets": [{k: t[k] for k in ("name", "contract", "overlap")} for t in targets],
            "options": {"device": opts.device, "mode": opts.mode, "reps": opts.reps, "profile": opts.profile.name,
                        "max_examples": opts.max_examples, "min_examples": opts.min_examples,
                        "contract_options": dict(sorted(opts.contract_options.items()))}}


def setup(args, targets: list, opts, default_database: str) -> tuple[Fleet, object]:
    """Join (or start) the campaign; the Fleet and the run's options (the corpus on the hub unless
    --database says otherwise).  UsageError: one line."""
    url = hub.check_url(args.fleet)
    if opts.crashes_dir is None:
        raise UsageError("--fleet needs a crash folder (--crashes-dir): findings are written there first")
    entries = [{"spec": t.name, "name": t.name, "contract": t.contract, "overlap": t.overlap,
                **({"path": t.path} if getattr(t, "path", None) else {})} for t in targets]
    spec = _spec(entries, opts)
    name = hub.check_name(args.campaign) if args.campaign else f"c-{hub.spec_digest(spec)}"
    client = hub.reach(url)
    try:
        hub.join(client, Keys(name), spec)
    except HubDown as exc:
        raise UsageError(f"the hub {url} does not answer: {exc}") from None
    if str(args.database) == default_database:
        opts = dataclasses.replace(opts, database=url)
    fleet = Fleet(url=url, campaign=name, box=box.box_name(args.box), targets=entries, spec=spec,
                  corpus_keys={t.name: box.corpus_key(t.fn) for t in targets},
                  crashes_dir=str(Path(opts.crashes_dir).absolute()), device=opts.device, ttl=args.lease_ttl,
                  per_target=args.workers_per_target, confirm_timeout=args.hang_timeout)
    return fleet, opts


def after(fleet: Fleet, reports: list) -> tuple[list, list[str], dict]:
    """The reports of the targets this box had a turn of; lines on the campaign; its JSON."""
    mine = [r for r in reports if r.examples or r.finding is not None or r.stop != "not-run"]
    outbox = Outbox(fleet.crashes_dir, fleet.campaign)
    client = hub.connect(fleet.url)
    state = {"campaign": fleet.campaign, "hub": fleet.url, "box": fleet.box,
             "fuzzed": [r.target for r in mine], "complete": None, "waiting": 0}
    until = time.monotonic() + FINAL_FLUSH
    lines = []
    while True:  # what the box's workers left in the outbox (a worker that ended while the hub was down)
        try:
            outbox.flush(lambda campaign, item: buckets.push(client, Keys(campaign), item))
            done = hub.call(client.hlen, fleet.keys.done)
            found = buckets.read(client, fleet.keys)
            state.update(complete=done == len(fleet.targets), done=done, buckets=len(found),
                         confirmed=sum(b.counts for b in found))
            lines.append(f"campaign {fleet.campaign}: box {fleet.box} fuzzed {len(mine)} of {len(fleet.targets)} "
                         f"target(s); {done} done; {len(found)} bucket(s), {state['confirmed']} confirmed")
            break
        except HubDown as exc:
            if time.monotonic() > until:
                lines.append(f"campaign {fleet.campaign}: the hub does not answer ({exc})")
                break
            time.sleep(0.5)
    state["waiting"] = waiting = outbox.waiting()
    if waiting:
        lines.append(f"{waiting} finding(s) wait for the hub in {outbox.folder}; once it answers, send them with:")
        lines.append(f"  mambafuzz collect {fleet.url} --campaign {fleet.campaign} --from {fleet.crashes_dir}")
    lines.append(f"collect: mambafuzz collect {fleet.url} --campaign {fleet.campaign} -o campaign-{fleet.campaign}")
    return mine, lines, state


def statuses(mine: list, state: dict) -> list[str]:
    """The statuses the box's exit code is made of: its own targets'; none fuzzed is clean only when the
    campaign is complete (every target done by some box), else inconclusive."""
    if mine:
        return [r.status for r in mine]
    return ["clean"] if state.get("complete") else []
