"""`peerify verify`: one review checked against its manuscript through the code location's own graph
(peerify_dagster/cli/verification.py), the claims printed with their verdicts and evidence and written as one HTML
page; with `--citations`, the manuscript's own citing sentences checked against the papers they cite as well (or
alone: the review is then optional), printed and written as a second page. Every input is checked before anything
is registered or built (the PDF against the upload limit, each review section against the configured extractor's
context window): a refused input is one line naming the file (or forum) and the reason, exit code 2."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from peerify_dagster import paths
from peerify_dagster.cli.common import ConfigError, refuse_object_store_lake, say
from peerify_dagster.domain import uploads
from peerify_dagster.domain.citation_view import format_citations


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise uploads.UploadError(f"{path}: cannot read the {what} ({error.strerror or error})") from None


def upload_from_files(pdf: str, reviews: list[str], responses: list[str], max_pdf_bytes: int) -> uploads.Upload:
    """The upload the files make, each checked (UploadError naming the file and the reason); a review's sections
    against the configured extractor's window."""
    data = _read(pdf, "PDF")
    uploads.check_pdf(pdf, data, max_pdf_bytes)
    review_limit = _review_limit() if reviews else None
    given_reviews, answers = [], []  # answers: (file, its responses)
    for path in reviews:
        found, answered = uploads.read_reviews(path, _read(path, "review"))
        uploads.check_review_length(path, found, review_limit)
        given_reviews += found
        answers.append((path, answered))
    answers += [(path, uploads.read_responses(path, _read(path, "response"))) for path in responses]
    for path, answered in answers:
        uploads.check_replies(path, answered, given_reviews)
    given_responses = [response for _, answered in answers for response in answered]
    return uploads.Upload(pdf=data, pdf_name=Path(pdf).name, reviews=tuple(given_reviews),
                          responses=tuple(given_responses))


def library_folder(folder: str) -> str:
    """`--library`'s folder as an absolute path, or UploadError naming it when it is no folder."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise uploads.UploadError(f"{folder}: the --library folder does not exist")
    if not path.is_dir():
        raise uploads.UploadError(f"{folder}: --library names a file, not a folder of PDFs")
    return str(path.resolve())


def cmd_verify(args: argparse.Namespace) -> int:
    from peerify_dagster.cli.verification import print_estimate

    for flag, limit in (("--max-cost-usd", args.max_cost_usd), ("--max-tokens", args.max_tokens)):
        if limit is not None and limit < 0:
            raise ConfigError(f"{flag} {limit}: a budget is zero or more")
    refuse_object_store_lake("`peerify verify`", paths.lake_root())
    by_forum = args.venue is not None or args.forum is not None
    if by_forum and (args.pdf or args.review or args.response):
        raise ConfigError("verify takes --pdf/--review/--response or --venue/--forum, not both (a forum's PDF, "
                          "reviews and author responses are in the forum)")
    if not (args.venue and args.forum if by_forum else args.pdf and (args.review or args.citations)):
        raise ConfigError("verify needs --pdf PAPER.pdf --review REVIEW (one or more) and/or --citations, or "
                          "--venue V --forum ID")
    if args.library is not None and not args.citations:
        raise ConfigError(f"--library {args.library}: the library is where cited papers are looked for; add "
                          "--citations")
    if not by_forum and not args.review and (args.response or args.configuration):
        raise ConfigError(f"{'--response' if args.response else '--configuration'} is for verifying a review: "
                          "add --review (--citations alone checks the paper's citing sentences only)")
    try:
        limit = int(args.max_pdf_mb * 2**20) if args.max_pdf_mb is not None else uploads.max_pdf_bytes()
        library = library_folder(args.library) if args.library is not None else None
        request = uploads.VerificationRequest(
            upload=None if by_forum else upload_from_files(args.pdf, args.review or [], args.response or [], limit),
            venue=args.venue, forum=args.forum, configurations=tuple(args.configuration or ()),
            max_cost_usd=args.max_cost_usd, max_tokens=args.max_tokens, citations=args.citations, library=library)
        return print_estimate(request) if args.estimate else _verify(request)
    except uploads.UploadError as refused:
        raise ConfigError(str(refused)) from None


def _review_limit() -> uploads.ReviewLimit:
    """How long a review section may be for the configured extractor (models.yaml, PEERIFY_LLM_PROFILE, ...)."""
    from peerify_dagster.resources.llm_gateway import ModelRegistry
    from peerify_dagster.resources.llm_gateway.errors import ConfigurationError

    try:
        return uploads.extractor_review_limit(ModelRegistry.load())
    except ConfigurationError as error:
        raise ConfigError(str(error)) from None


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
    if outcome.summary is not None:
        print(uploads.format_result(outcome.summary))
        print(f"\nresult: {outcome.html_path}")
    if outcome.citations is not None:
        print(("\n" if outcome.summary is not None else "") + format_citations(outcome.citations))
        print(f"\ncitations: {outcome.citations_path}")
    pages = ([f"/venues/{outcome.venue}/claims"] if outcome.summary is not None else []) + \
        ([f"/venues/{outcome.venue}/citances"] if outcome.citations is not None else [])
    table = "predictions" if outcome.summary is not None else "citation_verdicts"
    print(f"venue: {outcome.venue} (peerify serve: {', '.join(pages)}; "
          f'peerify sql "select * from {table} where venue = \'{outcome.venue}\'")')
    say(f"verified in {outcome.seconds:.1f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    verify = subparsers.add_parser(
        "verify", help="verify one review against its paper: claims, evidence passages and verdicts",
        description="Registers the paper and its review(s) as an upload venue (source `upload`, key "
                    "`upload-<content hash>`) and builds it through the same asset graph as any venue, up to the "
                    "predictions of the chosen configurations (not the labellers, arbitration or slices: those need "
                    "a benchmark). Prints each claim with its verdicts and the passages shown, and writes a one-page "
                    "HTML result under <lake>/uploads/<key>/. With --citations, the paper's citing sentences are "
                    "checked against the papers they cite as well (the `verify_citations` job) and written as "
                    "citations.html beside it. The same input again is answered from the LLM ledger. Inputs are "
                    "checked before anything runs: a PDF over the upload limit (--max-pdf-mb, PEERIFY_MAX_PDF_MB, "
                    "else 50 MB), or a review section longer than the configured extractor's context window leaves "
                    "room for, is refused naming the file.")
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
    verify.add_argument("--citations", action="store_true",
                        help="check the manuscript's own citing sentences against the papers they cite too (its "
                             "citances, bibliography, reference checks, cited papers, evidence and verdicts; "
                             "written as citations.html beside the result); with --pdf, the review is then optional")
    verify.add_argument("--library", metavar="FOLDER",
                        help="with --citations: a folder of PDFs where cited papers are looked for first (by DOI, "
                             "arXiv id, then title), kept in the upload venue's `citations:` options")
    verify.add_argument("--estimate", action="store_true",
                        help="print the LLM calls, tokens and cost the verification would make (claim extraction, "
                             "fact tagging, each configuration's verifiers, and with --citations the citation "
                             "verdicts; ranges, as `peerify build --estimate`) without calling any model or "
                             "registering anything")
    verify.add_argument("--max-cost-usd", type=float, metavar="USD",
                        help="the LLM budget of the whole verification (ledger hits are free)")
    verify.add_argument("--max-tokens", type=int, metavar="N", help="the same budget in tokens (input + output)")
    verify.add_argument("--max-pdf-mb", type=float, metavar="MB",
                        help="refuse a larger PDF (default: PEERIFY_MAX_PDF_MB, else 50)")
    verify.set_defaults(func=cmd_verify)
