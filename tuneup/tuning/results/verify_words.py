"""What a verify found, in words: the CLI's lines, the app's box and the md report's
section say it alike. Pure: a Verified in, text out."""

from __future__ import annotations

from tuneup.tuning.results.verified import TargetCheck, Verified


def factor_text(value: float, low: float | None = None, high: float | None = None) -> str:
    """A speedup and its range as every verify line words it: "1.31x (1.22-1.40x)"."""
    if low is None or high is None:
        return f"{value:.2f}x"
    return f"{value:.2f}x ({low:.2f}-{high:.2f}x)"


def how_text(verified: Verified) -> str:
    """How the runs ran: their data, their measured time and their order."""
    how = f"real runs on {verified.data}" if verified.data else "real runs"
    if verified.seconds:
        order = "A B B A order" if verified.rounds > 1 else "one run each"
        how += (
            f"; each configuration {verified.seconds:.3g} s after warm-up, "
            f"{verified.rounds} round(s), {order}"
        )
    return how


def verdict_text(check: TargetCheck) -> str:
    """ "within the claim", "OUTSIDE the claim (below): PART", or why nothing was judged."""
    if check.within_claim is None:
        return check.reason
    if check.within_claim:
        return "within the claim"
    part = check.moved[0].text if check.moved else check.reason
    return f"OUTSIDE the claim ({check.outside}): {part}"


def claim_text(check: TargetCheck) -> str:
    if check.claimed_factor is None:
        return "none"
    return factor_text(check.claimed_factor, check.claimed_low, check.claimed_high)


def real_text(check: TargetCheck) -> str:
    if check.real_factor is None:
        return "-"
    return factor_text(check.real_factor, check.real_low, check.real_high)


def rates_text(check: TargetCheck) -> str:
    """ "582.1 samples/s (the baseline's 439.9)"; "" where either is unknown."""
    if check.real_sps is None or check.baseline_sps is None:
        return ""
    return f"{check.real_sps:,.1f} samples/s (the baseline's {check.baseline_sps:,.1f})"


def check_line(check: TargetCheck) -> str:
    """One target's real run against its claim, in one line."""
    name = check.label or check.target
    if check.real_factor is None:
        return f"{name}: {check.reason}"
    rates = rates_text(check)
    real = f"real {real_text(check)}" + (f", {rates}" if rates else "")
    if check.within_claim is None:
        return f"{name}: {real}; {check.reason}"
    return f"{name}: {real}; claimed {claim_text(check)}: {verdict_text(check)}"


def verified_lines(verified: Verified) -> list[str]:
    """What a verify found: how it ran, each target's line with the command of its
    recommendation's run, what it did not run, and how to run it again."""
    lines = [how_text(verified)]
    for check in verified.targets:
        lines.append(check_line(check))
        if check.command:
            lines.append(f"  its run: {check.command}")
    lines += [f"not run: {target} ({why})" for target, why in verified.skipped]
    if verified.stopped:
        lines.append(f"stopped: {verified.stopped} (what finished is kept)")
    if verified.command:
        lines.append(f"reproduce: {verified.command}")
    return lines
