"""``desktop-queue alerts``: the alert history and the active alerts; ``alerts rules``: their settings.

Also builds the :class:`~desktop_queue.core.repair.Upkeep` that ``work`` runs from its
lease driver's tick (repair scan, notification outbox, alerts), so that the command line
and the window keep one data dir healthy the same way.

``cli.py`` hooks this module in with :func:`add_parser` and :func:`run`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.alerts import (
    DEFAULTS,
    EDITABLE,
    FIRED,
    USES_WINDOW,
    AlertBook,
    Rule,
    RuleError,
    Transition,
    apply_setting,
    load_rules,
    rules_path,
    save_rules,
)
from desktop_queue.core.model import iso
from desktop_queue.core.paths import data_dir as resolve_data_dir

PROG = "desktop-queue"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: history lines ``alerts`` prints unless told
HISTORY_DEFAULT = 50


def add_parser(sub: Any) -> None:
    """Adds ``alerts`` (and ``alerts rules``) to the command line's subparsers."""
    p = sub.add_parser("alerts", help="trend alerts: the active ones and the history (alerts rules: their settings)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--limit", type=_count, default=HISTORY_DEFAULT, help="history entries to show (default: 50)")
    asub = p.add_subparsers(dest="alerts_command", metavar="ACTION", parser_class=type(p))
    q = asub.add_parser("rules", help="show or change the alert rules (saved in the config dir's alerts.json)")
    q.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME.FIELD=VALUE",
        help=f"change a setting ({', '.join(EDITABLE)}); may be repeated",
    )
    q.add_argument("--disable", action="append", default=[], metavar="NAME", help="turn a rule off")
    q.add_argument("--enable", action="append", default=[], metavar="NAME", help="turn a rule on")
    q.add_argument("--reset", action="append", default=[], metavar="NAME", help="back to the rule's defaults")
    q.add_argument("--json", action="store_true", help="print JSON")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, not {value}")
    return value


def _out(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: {message}\n")


def run(args: argparse.Namespace) -> int:
    """Runs ``alerts`` or ``alerts rules``; returns the exit code."""
    if getattr(args, "alerts_command", None) == "rules":
        return _rules(args)
    return _show(args)


def _show(args: argparse.Namespace) -> int:
    book = AlertBook(resolve_data_dir(args.data_dir))
    history = book.history()
    for notice in [*history.notices, *book.notices]:
        _err(f"note: {notice}")
    active = book.active()
    recent = list(reversed(history.transitions))[: args.limit]
    if args.json:
        _out({"active": [t.to_json() for t in active], "history": [t.to_json() for t in recent]})
        return EXIT_OK
    if active:
        print("active:")
        for t in active:
            print(f"  {iso(t.at)}  {_label(t)}  {t.text}")
    else:
        print("no active alerts")
    if recent:
        print("history (newest first):")
        for t in recent:
            print(f"  {iso(t.at)}  {t.kind:<7}  {_label(t)}  {t.text}")
    return EXIT_OK


def _label(t: Transition) -> str:
    return t.rule + (f" [{t.subject}]" if t.subject else "")


def _rules(args: argparse.Namespace) -> int:
    notices: list[str] = []
    rules = load_rules(notices=notices)
    for notice in notices:
        _err(f"note: {notice}")
    changed = False
    try:
        for name in args.reset:
            if name not in DEFAULTS:
                raise RuleError(f"no alert rule {name!r} (rules: {', '.join(sorted(DEFAULTS))})")
            rules[name], changed = DEFAULTS[name], True
        for item in args.set:
            target, sep, value = item.partition("=")
            name, dot, field_name = target.partition(".")
            if not sep or not dot or not name or not field_name:
                raise RuleError(f"--set wants NAME.FIELD=VALUE, not {item!r}")
            parsed: Any = value.strip()
            if field_name == "enabled":
                if parsed.lower() not in ("true", "false", "on", "off", "yes", "no"):
                    raise RuleError(f"{name}.enabled must be true or false, not {value!r}")
                parsed = parsed.lower() in ("true", "on", "yes")
            elif field_name == "clear_below" and parsed.lower() in ("", "none"):
                parsed = None
            rules, changed = apply_setting(rules, name, field_name, parsed), True
        for name in args.disable:
            rules, changed = apply_setting(rules, name, "enabled", False), True
        for name in args.enable:
            rules, changed = apply_setting(rules, name, "enabled", True), True
    except RuleError as exc:
        _err(str(exc))
        return EXIT_USAGE
    if changed:
        path = save_rules(rules)
        if not args.json:
            _err(f"saved to {path}; running windows and workers use it from their next scan")
    if args.json:
        _out({"path": str(rules_path()), "rules": [r.to_json() for r in rules.values()]})
        return EXIT_OK
    for rule in rules.values():
        state = "on " if rule.enabled else "off"
        default = DEFAULTS[rule.name]
        same = all(getattr(rule, f) == getattr(default, f) for f in (*EDITABLE, "enabled"))
        mark = "" if same else " (changed)"
        print(f"{state} {rule.name:<22} {_settings(rule)}{mark}")
        print(f"    {rule.text}")
    return EXIT_OK


def _settings(rule: Rule) -> str:
    parts = [f"threshold={rule.threshold:g}"]
    if rule.clear_below is not None:
        parts.append(f"clear_below={rule.clear_below:g}")
    if rule.name in USES_WINDOW:
        parts.append(f"window_s={rule.window_s:g}")
    parts += [f"for_s={rule.for_s:g}", f"clear_s={rule.clear_s:g}"]
    if rule.min_s:
        parts.append(f"min_s={rule.min_s:g}")
    return " ".join(parts)


# ---------------------------------------------------------------------- `work`'s upkeep


def budgets_of(profiles: Any) -> dict[str, Any]:
    """Profile -> its budget, from a :class:`~desktop_queue.providers.profiles.ProfileSet`."""
    return {p.name: p.budget() for p in getattr(profiles, "profiles", ())}


def work_upkeep(
    queue: Any,
    driver: Any,
    *,
    flow: Any = None,
    budgets: Callable[[], Mapping[str, Any]] | None = None,
    say: Callable[[str], None] = _err,
) -> Any:
    """The upkeep ``work`` runs: repair scan, outbox (notices logged while no window is open), alerts (logged).

    Args:
        queue: the opened queue.
        driver: the lease driver (its free capacity decides whether a late job is stuck).
        flow: flow control (breakers and budgets), read only.
        budgets: profile -> budget, asked on every scan.
        say: where notices and alerts go (stderr).
    """
    from desktop_queue.core.outbox import Outbox, log_lines
    from desktop_queue.core.repair import RepairScan, Upkeep

    data_dir = Path(queue.data_dir)
    outbox = Outbox(data_dir, queue.clock.now)
    outbox.start(queue)  # what this worker finishes is announced, by it or by a window
    scan = RepairScan(
        queue,
        outbox=outbox,
        providers=driver.providers,
        flow=flow,
        capacity_free=lambda: not driver.paused and driver.running < driver.concurrency,
    )

    def deliver(notices: list[Any]) -> None:
        for line in log_lines(notices):
            say(f"notice: {line}")  # (by id and kind: a title may be a prompt's first line)

    def announce(transitions: list[Transition]) -> None:
        for t in transitions:
            say(("alert: " if t.kind == FIRED else "alert cleared: ") + t.text)

    def rules() -> list[Rule]:
        return list(load_rules().values())

    return Upkeep(
        scan,
        book=AlertBook(data_dir),
        rules=rules,
        flow=flow,
        budgets=budgets,
        on_transitions=announce,
        deliver=deliver,
        deliver_when=lambda: not outbox.window_present(),  # an open window shows them on the desktop
    )


__all__ = ["add_parser", "budgets_of", "run", "work_upkeep"]
