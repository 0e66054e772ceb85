"""`peerify verify`: one review checked against its manuscript through the code location's own graph
(peerify_dagster/cli/verification.py), the claims printed with their verdicts and evidence and written as one HTML
page. Every input is checked before anything is registered or built: a refused input is one line naming the file
(or forum) and the reason, exit code 2."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from peerify_dagster.cli.common import ConfigError, say
from peerify_dagster.domain import uploads


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise uploads.UploadError(f"{path}: cannot read the {what} ({error.strerror or error})") from None


def upload_from_files(pdf: str, reviews: list[str], responses: list[str], max_pdf_bytes: int) -> uploads.Upload:
    """The upload the files make, each checked (UploadError naming the file and the reason)."""
    data = _read(pdf, "PDF")
    uploads.check_pdf(pdf, data, max_pdf_bytes)
    given_reviews, answers = [], []  # answers: (file, its responses)
    for path in reviews:
        found, answered = uploads.read_reviews(path, _read(path, "review"))
        given_reviews += found
        answers.append((path, answered))
    answers += [(path, uploads.read_responses(path, _read(path, "response"))) for path in responses]
    for path, answered in answers:
        uploads.check_replies(path, answered, given_reviews)
    given_responses = [response for _, answered in answers for response in answered]
    return uploads.Upload(pdf=data, pdf_name=Path(pdf).name, reviews=tuple(given_reviews),
                          responses=tuple(given_responses))


def cmd_verify(args: argparse.Namespace) -> int:
    from peerify_dagster.cli.verification import print_estimate

    for flag, limit in (("--max-cost-usd", args.max_cost_usd), ("--max-tokens", args.max_tokens)):
        if limit is not None and limit < 0:
            raise ConfigError(f"{flag} {limit}: a budget is zero or more")
    by_forum = args.venue is not None or args.forum is not None
    if by_forum and (args.pdf or args.review or args.response):
        raise ConfigError("verify takes --pdf/--review/--response or --venue/--forum, not both (a forum's PDF, "
                          "reviews and author responses are in the forum)")
    if not (args.venue and args.forum if by_forum else args.pdf and args.review):
        raise ConfigError("verify needs --pdf PAPER.pdf --review REVIEW (one or more), or --venue V --forum ID")
    try:
        limit = int(args.max_pdf_mb * 2**20) if args.max_pdf_mb is not None else uploads.max_pdf_bytes()
        request = uploads.VerificationRequest(
            upload=None if by_forum else upload_from_files(args.pdf, args.review, args.response or [], limit),
            venue=args.venue, forum=args.forum, configurations=tuple(args.configuration or ()),
            max_cost_usd=args.max_cost_usd, max_tokens=args.max_tokens)
        return print_estimate(request) if args.estimate else _verify(request)
    except uploads.UploadError as refused:
        raise ConfigError(str(refused)) from None


def _verify(request: uploads.VerificationRequest) -> int:
    from peerify_dagster.cli.build_session import BuildInterrupted, StopSignals
    from peerify_dagster.cli.verification import run_verification

    def progress(phase: str, message: str, percent: float) -> None:
        say(f"[{percent:3.0f}%] {message}")

    with StopSignals() as stop:
        try:
            outcome = run_verification(request, progress, stop, holder=f"peerify verify (pid {os.getpid()})")
        except BuildInterrupted as interrupted:
            say(interrupted.describe())
            return interrupted.exit_code
    say(outcome.usage)
    if not outcome.succeeded:
        say(f"verify of {outcome.venue} stopped: {outcome.failure}")
        return 1
    print(uploads.format_result(outcome.summary))
    print(f"\nresult: {outcome.html_path}")
    print(f"venue: {outcome.venue} (peerify serve: /venues/{outcome.venue}/claims; "
          f'peerify sql "select * from predictions where venue = \'{outcome.venue}\'")')
    say(f"verified in {outcome.seconds:.1f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    verify = subparsers.add_parser(
        "verify", help="verify one review against its paper: claims, evidence passages and verdicts",
        description="Registers the paper and its review(s) as an upload venue (source `upload`, key "
                    "`upload-<content hash>`) and builds it through the same asset graph as any venue, up to the "
                    "predictions of the chosen configurations (not the labellers, arbitration or slices: those need "
                    "a benchmark). Prints each claim with its verdicts and the passages shown, and writes a one-page "
                    "HTML result under <lake>/uploads/<key>/. The same input again is answered from the LLM ledger.")
    verify.add_argument("--pdf", metavar="PAPER.pdf", help="the manuscript")
    verify.add_argument("--review", action="append", metavar="FILE",
                        help="a review: plain text (OpenReview's `Summary: ...` field labels are kept as sections), "
                             "or JSON: an OpenReview review note, a list of them, or {\"reviews\": [...], "
                             "\"responses\": [...]} (repeatable)")
    verify.add_argument("--response", action="append", metavar="FILE",
                        help="an author response: plain text, or JSON notes (`replyto` naming the review they "
                             "answer); repeatable")
    verify.add_argument("--venue", help="verify one forum of this built venue instead (with --forum)")
    verify.add_argument("--forum", metavar="ID", help="the forum (paper) id in --venue")
    verify.add_argument("--configuration", action="append", metavar="NAME",
                        help="a configuration of configurations.yaml (repeatable; default: its `upload_venues:`)")
    verify.add_argument("--estimate", action="store_true",
                        help="print the LLM calls, tokens and cost the verification would make (claim extraction, "
                             "fact tagging, each configuration's verifiers; ranges, as `peerify build --estimate`) "
                             "without calling any model or registering anything")
    verify.add_argument("--max-cost-usd", type=float, metavar="USD",
                        help="the LLM budget of the whole verification (ledger hits are free)")
    verify.add_argument("--max-tokens", type=int, metavar="N", help="the same budget in tokens (input + output)")
    verify.add_argument("--max-pdf-mb", type=float, metavar="MB",
                        help="refuse a larger PDF (default: PEERIFY_MAX_PDF_MB, else 50)")
    verify.set_defaults(func=cmd_verify)
