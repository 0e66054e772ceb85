"""Scholarly metadata for the reference checks: each bibliography entry looked up at Crossref, OpenAlex and Semantic
Scholar (the ones a venue configures), with the crawler's HTTP policy and a disk cache of the answers.

An entry is looked up by its DOI, else (or when the DOI is unknown there) by its arXiv id, else by a search for its
title: Crossref `/works/{doi}` and `/works?query.bibliographic=...`; OpenAlex `/works/doi:{doi}` (an arXiv id under
arXiv's DOI, 10.48550/arXiv.<id>) and `/works?search=...`; Semantic Scholar `/graph/v1/paper/DOI:{doi}`,
`/graph/v1/paper/arXiv:{id}` and `/graph/v1/paper/search?query=...`. The answers are read by
`domain/citations/metadata.py`, which also decides the entry's status (`check_entry`).

Which client each service is asked with, and why:
* Crossref: habanero (its maintained client). It takes a base URL and a timeout, but retries nothing and keeps no
  response on its errors (its `RequestError` holds a status and a message), so each call is wrapped here: the
  status and the Retry-After header are read from the httpx2 `HTTPStatusError` habanero raises or chains, and the
  same urllib3 `Retry` as the other two services decides whether to ask again and how long to wait first.
* OpenAlex: a requests session with the crawler's retry layer (`openreview.retrying_adapter`), not pyalex 0.21:
  pyalex builds every URL on the public host (its `openalex_url` setting is read by one endpoint only), so it
  cannot be pointed at a mirror or a loopback server; it sends without a timeout, so a hanging server blocks for
  ever; and its retry settings live in one process-wide `config` dict.
* Semantic Scholar: the same requests session, not semanticscholar 0.12.0: it turns a 429 into a
  `ConnectionRefusedError` without the response, so Retry-After is lost, and then waits its own fixed exponential
  backoff (5 s to 60 s, ten attempts); a 503 comes back as an empty paper, like a paper without fields.

Errors never leave `lookup`: a failed service gives a `ServiceAnswer` whose `error` says why in a few words
("HTTP 429 after 4 tries", "HTTP 500 after 4 tries", "malformed JSON (812 bytes)", "timed out after 10 s, 4 tries"),
so the rest of the batch is checked. A service that timed out TIMEOUTS_BEFORE_SKIP times in a row is not asked again
by this client (each entry's row says so): a hanging host would otherwise cost every entry the full timeout.

The cache: one JSON file per request (`<cache>/<service>/<sha256 of the request>.json`, written atomically) holding
the service's answer, a work or a list (a 404 as "not found"), so a rebuild asks nothing again. The request that
keys it is the service's base URL, the path and the query without `mailto`; the Semantic Scholar API key (environment
variable
SEMANTIC_SCHOLAR_API_KEY, sent as the x-api-key header) is in neither, nor in any log or error. Failures and answers
of an unexpected shape are not cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import habanero
import httpx2
import requests
from urllib3.exceptions import MaxRetryError

from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.metadata import (
    BY_ARXIV_ID,
    BY_DOI,
    BY_TITLE,
    CROSSREF,
    OPENALEX,
    RECORD_READERS,
    SEMANTIC_SCHOLAR,
    VALIDATED,
    MetadataFormatError,
    MetadataRecord,
    ReferenceCheck,
    check_entry,
)
from peerify_dagster.domain.citations.options import METADATA_INDEX, METADATA_SERVICES, CitationOptions
from peerify_dagster.domain.citations.resolution import entry_arxiv_id
from peerify_dagster.domain.citations.titles import normalise_title
from peerify_dagster.resources.files import json_bytes
from peerify_dagster.resources.llm_gateway.limits import RateLimiter
from peerify_dagster.resources.openreview import HttpPolicy, describe_failure, retrying_adapter
from peerify_dagster.resources.store import LakeStore, Location

DEFAULT_BASE_URLS = {
    CROSSREF: "https://api.crossref.org",
    OPENALEX: "https://api.openalex.org",
    SEMANTIC_SCHOLAR: "https://api.semanticscholar.org",
}
# Requests per second each service is asked at most. Crossref's public and polite pools allow more but five at a
# time; OpenAlex allows ten per second; Semantic Scholar gives an API key one per second (and shares a pool among
# callers without one).
DEFAULT_REQUESTS_PER_SECOND = {CROSSREF: 5.0, OPENALEX: 5.0, SEMANTIC_SCHOLAR: 1.0}
# A metadata answer is small: a host that sends nothing in 10 s is asked again at most three times, then recorded.
SCHOLARLY_POLICY = HttpPolicy(timeout_s=10.0, retries=3, backoff_s=1.0, backoff_max_s=30.0)
TIMEOUTS_BEFORE_SKIP = 3
# Lookups of one service under way at once: enough to fill its rate limit when an answer takes TYPICAL_ANSWER_S (a
# sequential client answered in 200 ms is capped at 5 a second whatever its limit), at most MAX_IN_FLIGHT; the
# limiter still spaces every start.
TYPICAL_ANSWER_S = 0.5
MAX_IN_FLIGHT = 16
SEARCH_ROWS = 5  # title-search candidates read per service: the cited work is among the first when it is there
S2_FIELDS = "title,authors,year,venue,journal,externalIds,openAccessPdf"
S2_API_KEY_VARIABLE = "SEMANTIC_SCHOLAR_API_KEY"
CACHE_DIR = "scholarly_cache"  # under the lake
USER_AGENT = "peerify-dagster"
NOT_FOUND = 404
ARXIV_DOI_PREFIX = "10.48550/arxiv."  # as ParsedEntry keeps DOIs: lower-cased


@dataclass(frozen=True)
class ServiceAnswer:
    """What one service said about one entry: the records it gave (none when it knew nothing), or why it failed."""

    service: str
    records: tuple[MetadataRecord, ...] = ()
    error: str | None = None


class _Failure(Exception):
    """A request that gave no answer; `reason` is the few words the entry's row shows."""

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.timed_out = reason, timed_out


@dataclass(frozen=True)
class _Request:
    found_by: str  # metadata.LOOKUPS
    key: str  # "GET <path>?<query>": what the cache keys the answer by
    send: Callable[[], tuple[int, Any]]  # (200, body) or (404, None); raises _Failure


class AnswerCache:
    """The services' answers in the lake (a folder or S3) by request; `folder` None keeps nothing."""

    def __init__(self, folder: Path | Location | None) -> None:
        self.store = LakeStore(folder) if folder is not None else None
        self.folder = self.store.root if self.store is not None else None

    def _path(self, service: str, key: str) -> Location:
        assert self.folder is not None
        return self.folder / service / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()}.json"

    def get(self, service: str, key: str) -> tuple[int, Any] | None:
        if self.folder is None:
            return None
        try:
            stored = json.loads(self._path(service, key).read_text(encoding="utf-8"))
            return int(stored["status"]), stored["body"]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or unreadable: asked again and rewritten

    def put(self, service: str, key: str, status: int, body: Any) -> None:
        if self.folder is not None:
            answer = {"request": key, "status": status, "body": body}
            self.store.write_bytes(self._path(service, key), json_bytes(answer))


def _request_key(path: str, params: Mapping[str, str] | None = None) -> str:
    return f"GET {path}" + (f"?{urlencode(sorted(params.items()))}" if params else "")


def _tries(count: int) -> str:
    return f" after {count} tries" if count > 1 else ""


class MetadataService:
    """One service: the requests an entry needs (`_requests`, in order), each answered from the cache or the
    service, read into records. Subclasses say how a request is sent."""

    name: str

    def __init__(self, base_url: str, policy: HttpPolicy, requests_per_second: float, cache: AnswerCache) -> None:
        if requests_per_second <= 0:
            raise ValueError(f"{self.name}: requests per second must be positive, got {requests_per_second}")
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        self.cache = cache
        self.limiter = RateLimiter(requests_per_minute=60.0 * requests_per_second)
        self.in_flight = min(MAX_IN_FLIGHT, max(2, math.ceil(requests_per_second * TYPICAL_ANSWER_S)))
        self._timeouts_in_a_row = 0

    def _requests(self, entry: ParsedEntry) -> list[_Request]:
        raise NotImplementedError

    def lookup(self, entry: ParsedEntry) -> ServiceAnswer:
        """The service's records for the entry: those of the first identifier it knows, else of its title search."""
        try:
            for request in self._requests(entry):
                records = self._records(request)
                if records is not None:
                    return ServiceAnswer(self.name, tuple(records))
            return ServiceAnswer(self.name)
        except _Failure as failure:
            return ServiceAnswer(self.name, error=failure.reason)
        except MetadataFormatError as error:
            return ServiceAnswer(self.name, error=f"unexpected answer: {error}")
        except Exception as error:  # noqa: BLE001 - one entry's surprise must not stop the batch
            return ServiceAnswer(self.name, error=f"unexpected error: {type(error).__name__}: {error}"[:300])

    def _records(self, request: _Request) -> list[MetadataRecord] | None:
        """The request's records (None: not found), the answer cached once it reads."""
        # Keyed by the host too: a venue pointed at a mirror never shares answers with one asking the public API.
        key = f"{self.base_url} {request.key}"
        cached = self.cache.get(self.name, key)
        status, body = cached if cached is not None else self._send(request)
        records = None if status == NOT_FOUND else RECORD_READERS[self.name](body, request.found_by)
        if cached is None:
            self.cache.put(self.name, key, status, body)
        return records

    def _send(self, request: _Request) -> tuple[int, Any]:
        if self._timeouts_in_a_row >= TIMEOUTS_BEFORE_SKIP:
            raise _Failure(f"not asked: its last {self._timeouts_in_a_row} requests timed out")
        try:
            answer = request.send()
        except _Failure as failure:
            self._timeouts_in_a_row = self._timeouts_in_a_row + 1 if failure.timed_out else 0
            raise
        self._timeouts_in_a_row = 0
        return answer

    def _timed_out(self, tries: int) -> _Failure:
        return _Failure(f"timed out after {self.policy.timeout_s:g} s" + (f", {tries} tries" if tries > 1 else ""),
                        timed_out=True)


def _chained(error: BaseException, kind: type[BaseException]) -> Any:
    """The first exception of `kind` among `error` and the ones it was raised from or while handling."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class CrossrefService(MetadataService):
    """Crossref through habanero, each call retried here with urllib3's `Retry` (see the module's docstring)."""

    name = CROSSREF

    def __init__(self, base_url: str, mailto: str | None, policy: HttpPolicy, requests_per_second: float,
                 cache: AnswerCache) -> None:
        super().__init__(base_url, policy, requests_per_second, cache)
        # habanero puts mailto in the User-Agent ("(mailto:...)"), which is how Crossref's polite pool is joined
        self.client = habanero.Crossref(base_url=base_url.rstrip("/"), mailto=mailto, ua_string=USER_AGENT,
                                        timeout=policy.timeout_s)
        self._retry = retrying_adapter(policy).max_retries

    def _requests(self, entry: ParsedEntry) -> list[_Request]:
        requests_: list[_Request] = []
        if entry.doi:  # quoted: a DOI may hold "#", "?" or "<" (habanero appends it to the URL as it is)
            quoted = quote(entry.doi, safe="/")
            requests_.append(_Request(BY_DOI, _request_key(f"/works/{entry.doi}"),
                                      lambda: self._call(lambda: self.client.works(ids=quoted))))
        if entry.title and normalise_title(entry.title):
            # the bibliographic query is made for citations: title, first author and year rank the work first
            query = " ".join(str(part) for part in (entry.title, *entry.surnames[:1], entry.year) if part)
            requests_.append(_Request(
                BY_TITLE, _request_key("/works", {"query.bibliographic": query, "rows": str(SEARCH_ROWS)}),
                lambda: self._call(lambda: self.client.works(query_bibliographic=query, limit=SEARCH_ROWS))))
        return requests_

    def _call(self, call: Callable[[], Any]) -> tuple[int, Any]:
        retry, tries = self._retry, 0
        while True:
            tries += 1
            self.limiter.acquire()
            try:
                return 200, call()
            except Exception as error:  # noqa: BLE001 - habanero raises its own, httpx2's, RuntimeError and ValueError
                status_error = _chained(error, httpx2.HTTPStatusError)
                response = status_error.response if status_error is not None else None
                if response is not None and response.status_code == NOT_FOUND:
                    return NOT_FOUND, None
                timed_out = _chained(error, httpx2.TimeoutException) is not None
                transport = _chained(error, httpx2.TransportError) is not None
                retry_after = response.headers.get("Retry-After") if response is not None else None
                retryable = (timed_out or transport or (response is not None and retry.is_retry(
                    "GET", response.status_code, has_retry_after=retry_after is not None)))
                if retryable:
                    try:
                        retry = retry.increment("GET", self.client.base_url)
                    except MaxRetryError:
                        retryable = False
                if not retryable:
                    raise self._failure(error, response, timed_out, transport, tries) from error
                time.sleep(retry.parse_retry_after(retry_after) if retry_after is not None
                           and retry.respect_retry_after_header else retry.get_backoff_time())

    def _failure(self, error: Exception, response: Any, timed_out: bool, transport: bool, tries: int) -> _Failure:
        if response is not None:
            return _Failure(f"HTTP {response.status_code}{_tries(tries)}")
        if timed_out:
            return self._timed_out(tries)
        if transport:
            return _Failure(f"connection failed{_tries(tries)}: {_chained(error, httpx2.TransportError)}"[:300])
        if (decode_error := _chained(error, json.JSONDecodeError)) is not None:
            return _Failure(f"malformed JSON ({len(decode_error.doc.encode('utf-8'))} bytes)")
        if isinstance(error, habanero.RequestError):  # a 2xx answer that is not JSON at all
            return _Failure(f"malformed JSON: HTTP {error.status_code} answer is not JSON")
        return _Failure(f"unexpected error: {type(error).__name__}: {error}"[:300])


class _RequestsService(MetadataService):
    """A service asked through a requests session with the crawler's retry layer (timeouts, Retry-After, backoff)."""

    def __init__(self, base_url: str, policy: HttpPolicy, requests_per_second: float, cache: AnswerCache,
                 headers: Mapping[str, str], params: Mapping[str, str]) -> None:
        super().__init__(base_url, policy, requests_per_second, cache)
        self.session = requests.Session()
        adapter = retrying_adapter(policy)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update(headers)
        self._params = dict(params)  # sent with every request, never part of the cache key (mailto)

    def _request(self, found_by: str, path: str, params: Mapping[str, str] | None = None) -> _Request:
        return _Request(found_by, _request_key(path, params), lambda: self._get(path, params or {}))

    def _get(self, path: str, params: Mapping[str, str]) -> tuple[int, Any]:
        self.limiter.acquire()
        try:
            response = self.session.get(self.base_url + quote(path, safe="/:"), params={**params, **self._params})
        except requests.RequestException as error:
            reason, message = describe_failure(error)
            tries = self.policy.retries + 1  # a timeout or a failed connection was retried to the end
            if reason == "timeout":
                raise self._timed_out(tries) from error
            if reason == "connection_error":
                raise _Failure(f"connection failed{_tries(tries)}: {message}"[:300]) from error
            raise _Failure(f"{reason.replace('_', ' ')}: {message}"[:300]) from error
        retries = getattr(response.raw, "retries", None)
        tries = len(retries.history) + 1 if retries is not None else 1
        if response.status_code == NOT_FOUND:
            return NOT_FOUND, None
        if response.status_code != 200:
            raise _Failure(f"HTTP {response.status_code}{_tries(tries)}")
        try:
            return 200, response.json()
        except ValueError:
            raise _Failure(f"malformed JSON ({len(response.content)} bytes)") from None


class OpenAlexService(_RequestsService):
    name = OPENALEX

    def __init__(self, base_url: str, mailto: str | None, policy: HttpPolicy, requests_per_second: float,
                 cache: AnswerCache) -> None:
        # mailto joins OpenAlex's polite pool (a query parameter)
        super().__init__(base_url, policy, requests_per_second, cache, headers={"User-Agent": _user_agent(mailto)},
                         params={"mailto": mailto} if mailto else {})

    def _requests(self, entry: ParsedEntry) -> list[_Request]:
        requests_ = [self._request(BY_DOI, f"/works/doi:{entry.doi}")] if entry.doi else []
        arxiv_id = entry_arxiv_id(entry)
        # OpenAlex has arXiv works under arXiv's DataCite DOI; an entry citing that DOI was asked for it just above
        if arxiv_id and not (entry.doi or "").startswith(ARXIV_DOI_PREFIX):
            requests_.append(self._request(BY_ARXIV_ID, f"/works/doi:{ARXIV_DOI_PREFIX}{arxiv_id}"))
        if entry.title and normalise_title(entry.title):
            requests_.append(self._request(BY_TITLE, "/works", {"search": entry.title,
                                                                "per-page": str(SEARCH_ROWS)}))
        return requests_


class SemanticScholarService(_RequestsService):
    name = SEMANTIC_SCHOLAR

    def __init__(self, base_url: str, api_key: str | None, policy: HttpPolicy, requests_per_second: float,
                 cache: AnswerCache) -> None:
        headers = {"User-Agent": USER_AGENT, **({"x-api-key": api_key} if api_key else {})}
        super().__init__(base_url, policy, requests_per_second, cache, headers=headers, params={})

    def _requests(self, entry: ParsedEntry) -> list[_Request]:
        fields = {"fields": S2_FIELDS}
        requests_ = [self._request(BY_DOI, f"/graph/v1/paper/DOI:{entry.doi}", fields)] if entry.doi else []
        arxiv_id = entry_arxiv_id(entry)
        if arxiv_id:
            requests_.append(self._request(BY_ARXIV_ID, f"/graph/v1/paper/arXiv:{arxiv_id}", fields))
        if entry.title and normalise_title(entry.title):
            # the search has no query syntax and finds nothing for hyphenated words: the title's plain words
            requests_.append(self._request(BY_TITLE, "/graph/v1/paper/search", {
                "query": normalise_title(entry.title), "fields": S2_FIELDS, "limit": str(SEARCH_ROWS)}))
        return requests_


def _user_agent(mailto: str | None) -> str:
    return f"{USER_AGENT} (mailto:{mailto})" if mailto else USER_AGENT


class MetadataSource(Protocol):
    """What the client asks per entry: a service, or the offline index (resources/metadata_index.py)."""

    def lookup(self, entry: ParsedEntry) -> ServiceAnswer: ...


class ScholarlyClient:
    """The configured sources (`services`, of METADATA_SERVICES, asked in this order), each network service at its
    base URL (`base_urls`, default the public APIs), at most `requests_per_second` (per service) and with `policy`'s
    timeout and retries; `cache_dir` (the lead's `<lake>/scholarly_cache`) holds the answers per service. `index`:
    the offline metadata index, required when `services` lists it; it is asked first, and an entry it validates
    is asked of no network service."""

    def __init__(self, services: Sequence[str], base_urls: Mapping[str, str] | None = None,
                 mailto: str | None = None, cache_dir: Path | None = None, policy: HttpPolicy = SCHOLARLY_POLICY,
                 requests_per_second: Mapping[str, float] | None = None, index: MetadataSource | None = None) -> None:
        unknown = [name for name in services if name not in METADATA_SERVICES]
        if unknown:
            raise ValueError(f"unknown metadata services {unknown}; expected some of {list(METADATA_SERVICES)}")
        if METADATA_INDEX in services and index is None:
            raise ValueError("the metadata sources list the index, but no index was given")
        urls = {**DEFAULT_BASE_URLS, **(base_urls or {})}
        rates = {**DEFAULT_REQUESTS_PER_SECOND, **(requests_per_second or {})}
        cache = AnswerCache(cache_dir)
        builders: dict[str, Callable[[], MetadataSource]] = {
            METADATA_INDEX: lambda: index,
            CROSSREF: lambda: CrossrefService(urls[CROSSREF], mailto, policy, rates[CROSSREF], cache),
            OPENALEX: lambda: OpenAlexService(urls[OPENALEX], mailto, policy, rates[OPENALEX], cache),
            SEMANTIC_SCHOLAR: lambda: SemanticScholarService(
                urls[SEMANTIC_SCHOLAR], os.environ.get(S2_API_KEY_VARIABLE) or None, policy, rates[SEMANTIC_SCHOLAR],
                cache),
        }
        self.services: dict[str, MetadataSource] = {name: builders[name]() for name in dict.fromkeys(services)}

    @classmethod
    def from_options(cls, options: CitationOptions, cache_dir: Path | None,
                     policy: HttpPolicy = SCHOLARLY_POLICY, index: MetadataSource | None = None) -> ScholarlyClient:
        """The client a venue's `citations:` options configure (`metadata`, `mailto`, `base_urls`), with `index`
        when `metadata` lists it."""
        base_urls = {name: url for name, url in options.base_urls.items() if name in METADATA_SERVICES}
        return cls(options.metadata, base_urls, options.mailto, cache_dir, policy, index=index)

    def lookup(self, entry: ParsedEntry) -> dict[str, ServiceAnswer]:
        return self._answers([entry])[0]

    def check(self, entry: ParsedEntry) -> ReferenceCheck:
        return _check(entry, self.lookup(entry))

    def check_all(self, entries: Sequence[ParsedEntry]) -> list[ReferenceCheck]:
        """Every entry's check, in order (see `_answers`)."""
        return [_check(entry, answers) for entry, answers in zip(entries, self._answers(entries))]

    def _answers(self, entries: Sequence[ParsedEntry]) -> list[dict[str, ServiceAnswer]]:
        """Each entry's answers: the index's first (an entry it validates goes no further), then the network
        services' side by side (one thread each, every one within its own rate limit), each going through the
        entries in order."""
        answers: list[dict[str, ServiceAnswer]] = [{} for _ in entries]
        pending = list(range(len(entries)))
        if METADATA_INDEX in self.services:
            for position in pending:
                answers[position][METADATA_INDEX] = self.services[METADATA_INDEX].lookup(entries[position])
            pending = [position for position in pending
                       if _check(entries[position], answers[position]).status != VALIDATED]
        network = {name: service for name, service in self.services.items() if isinstance(service, MetadataService)}
        if network and pending:
            with ThreadPoolExecutor(max_workers=len(network), thread_name_prefix="scholarly") as pool:
                futures = {name: pool.submit(_lookup_all, service, [entries[p] for p in pending])
                           for name, service in network.items()}
                for name, future in futures.items():
                    for position, answer in zip(pending, future.result()):
                        answers[position][name] = answer
        return answers


def _lookup_all(service: MetadataService, entries: Sequence[ParsedEntry]) -> list[ServiceAnswer]:
    """One service's answers, in order, `service.in_flight` lookups at a time."""
    with ThreadPoolExecutor(max_workers=service.in_flight, thread_name_prefix="lookup") as pool:
        return list(pool.map(service.lookup, entries))


def _check(entry: ParsedEntry, answers: Mapping[str, ServiceAnswer]) -> ReferenceCheck:
    return check_entry(entry, {name: answer.records for name, answer in answers.items() if answer.error is None},
                       {name: answer.error for name, answer in answers.items() if answer.error is not None})
