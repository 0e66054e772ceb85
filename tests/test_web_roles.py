"""The web app's two roles, over plain HTTP with cookies: a signed-in annotator works blind (every maintainer page
answers 403 saying why, whatever the route, and the header links only the annotator pages) while the annotator pages
still work; the maintainer sees everything; on a server with an access token annotators sign in with the annotator
pass, which never opens the maintainer's views."""

from __future__ import annotations

import html
import re
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster.annotation.decisions import DecisionLedger
from peerify_dagster.web.app import create_app
from peerify_dagster.web.data import LakeData
from peerify_dagster.web.pages import venue_url
from peerify_dagster.web.security import (
    ANNOTATOR_ROUTES,
    BLIND_MESSAGE,
    PASS_ONLY_MESSAGE,
    annotator_pass,
)
from tests.web_support import Client, csrf_from, live_server, sign_in_client

VENUE = "sample"
TOKEN = "a-token-for-the-roles-tests"
_NAV = re.compile(r'<nav data-testid="nav">(.*?)</nav>', re.S)
_PARAMETER = re.compile(r"\{[^}]+\}")


@pytest.fixture(scope="module")
def maintainer_pages(web_lake: Path) -> dict[str, str]:
    """What each maintainer page is, by its URL on the sample: the pages that show automated labels, labellers'
    answers or claim ids, and the files only they link to."""
    data = LakeData(web_lake)
    claim_id = data.claim_index(VENUE).claims["claim_id"][0]
    pdf = data.table("manuscript_pdfs", VENUE).filter(pl.col("sha256").is_not_null())["sha256"][0]
    return {
        "overview and metrics": venue_url(VENUE),
        "claim browser": venue_url(VENUE, "claims"),
        "claim page": venue_url(VENUE, "claims", claim_id),
        "manuscript pane": venue_url(VENUE, "claims", claim_id, "manuscript"),
        "page image": f"/pdf/{pdf}/page/1.png",
        "report figure": f"/figures/{data.figures(VENUE)[0]['sha256']}.png",
        "verify": "/verify",
    }


def annotator(server, name: str = "Ann") -> Client:  # noqa: ANN001 - a LiveServer
    client = server.client()
    sign_in_client(client, name, token=server.token)
    return client


def nav_links(page: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', _NAV.search(page).group(1))


def refusal(answer) -> str:  # noqa: ANN001 - a requests Response
    assert answer.status_code == 403, (answer.status_code, answer.url)
    return html.unescape(answer.text)


def test_an_annotator_is_refused_the_maintainers_pages_which_the_maintainer_gets(web_server, maintainer_pages):
    maintainer, ann = web_server.client(), annotator(web_server)
    claim_id = maintainer_pages["claim page"].rsplit("/", 1)[1]
    for what, path in maintainer_pages.items():
        assert maintainer.get(path).status_code == 200, what
        refused = refusal(ann.get(path))
        assert BLIND_MESSAGE in refused and claim_id not in refused, what
    fragment = ann.get(maintainer_pages["claim browser"], headers={"HX-Request": "true"})  # htmx: the message alone
    assert BLIND_MESSAGE in refusal(fragment) and "<nav" not in fragment.text
    posted = ann.post("/verify", data={"csrf_token": csrf_from(ann.get("/signin").text)})
    assert BLIND_MESSAGE in refusal(posted)  # a form of a maintainer page too, CSRF token or not
    home = ann.get("/")
    assert (home.status_code, home.headers["location"]) == (303, "/arbitration")  # the annotator's start page


def test_every_route_not_listed_for_annotators_refuses_them(web_server, web_lake):
    """No route can forget the check: whatever its path parameters, every route of the app outside ANNOTATOR_ROUTES
    answers an annotator 403 before its handler runs (`/`, the venues, sends them on to arbitration)."""
    routes = create_app(web_lake, token=None).routes
    names = {route.name for route in routes}
    assert ANNOTATOR_ROUTES <= names  # a renamed annotator route would be closed to annotators: named here
    assert {"venue", "claims", "claim", "manuscript_pane", "manuscript_page", "report_figure"} <= names - \
        ANNOTATOR_ROUTES
    ann = annotator(web_server, "Ivo")
    token = csrf_from(ann.get("/signin").text)
    checked = 0
    for route in routes:
        if route.name in ANNOTATOR_ROUTES or route.name == "venues":
            continue
        path = _PARAMETER.sub("1", route.path)
        method = sorted(route.methods - {"HEAD"})[0]
        answer = ann.request(method, path, data={"csrf_token": token} if method != "GET" else None)
        assert BLIND_MESSAGE in refusal(answer), (route.name, method, path)
        checked += 1
    assert checked >= 8


def test_the_header_links_only_the_pages_of_the_role(web_server):
    maintainer, ann = web_server.client(), annotator(web_server, "Bea")
    assert nav_links(maintainer.get("/arbitration").text) == ["/", "/arbitration", "/verify", "/references"]
    page = ann.get("/arbitration").text
    assert nav_links(page) == ["/arbitration"]
    assert 'data-testid="annotator">Bea<' in page and "(annotator, blind)" in page
    assert "Annotators work blind" in ann.get("/signin").text  # the sign-in form says what signing in means


def test_the_annotator_pages_still_work(web_server, web_lake):
    ann = annotator(web_server, "Cas")
    for path in ("/arbitration", venue_url(VENUE, "arbitration"), venue_url(VENUE, "agreement")):
        assert ann.get(path).status_code == 200, path
    item_url = ann.get(venue_url(VENUE, "arbitration", "arbitration")).headers["location"]
    item = ann.get(item_url)
    assert item.status_code == 200 and 'data-testid="item-id"' in item.text
    before = len(DecisionLedger(web_lake, VENUE).read().decisions)
    decided = ann.post(f"{item_url}/decide", data={"csrf_token": csrf_from(item.text), "key": "d"})
    assert decided.status_code == 303
    assert [d.annotator for d in DecisionLedger(web_lake, VENUE).read().decisions[before:]] == ["Cas"]


def test_signing_out_opens_the_maintainers_views(web_server, maintainer_pages):
    ann = annotator(web_server, "Dee")
    refusal(ann.get(maintainer_pages["claim page"]))
    out = ann.post("/signout", data={"csrf_token": csrf_from(ann.get("/arbitration").text)})
    assert (out.status_code, out.headers["location"]) == (303, "/")
    assert ann.get(maintainer_pages["claim page"]).status_code == 200


def test_on_a_token_server_the_annotator_pass_opens_the_annotator_pages_only(web_lake, maintainer_pages):
    the_pass = annotator_pass(TOKEN)
    assert the_pass != TOKEN and the_pass != annotator_pass(TOKEN + "x") and len(the_pass) >= 24
    claim_page = maintainer_pages["claim page"]
    with live_server(web_lake, token=TOKEN) as server:
        maintainer = server.client()
        venues = maintainer.get(f"/?token={TOKEN}", follow=True)
        assert venues.status_code == 200 and the_pass in venues.text  # the maintainer hands the pass out
        assert maintainer.get(claim_page).status_code == 200
        # the pass is no access token: it opens nothing from a URL
        stranger = server.client()
        assert stranger.get(f"{claim_page}?token={the_pass}").headers["location"].startswith("/signin")
        # an annotator signed in with the pass: the annotator pages, never the maintainer's, not even signed out
        ann = server.client()
        sign_in_client(ann, "Eve", token=the_pass)
        assert ann.get(venue_url(VENUE, "agreement")).status_code == 200
        refused = refusal(ann.get(claim_page))
        assert BLIND_MESSAGE + PASS_ONLY_MESSAGE in refused and the_pass not in refused
        out = ann.post("/signout", data={"csrf_token": csrf_from(ann.get("/arbitration").text)})
        assert out.headers["location"] == "/signin"
        assert ann.get(claim_page).headers["location"].startswith("/signin")
        assert ann.get("/").headers["location"].startswith("/signin")
        # the maintainer signed in with the token itself is blind while signed in, and sees all again signed out
        sign_in_client(maintainer, "Max")
        refusal(maintainer.get(claim_page))
        maintainer.post("/signout", data={"csrf_token": csrf_from(maintainer.get("/arbitration").text)})
        assert maintainer.get(claim_page).status_code == 200
        wrong = server.client()
        page = wrong.get("/signin")
        answer = wrong.post("/signin", data={"name": "Zed", "token": "not-the-pass-at-all",
                                             "csrf_token": csrf_from(page.text), "next": "/"})
        assert answer.status_code == 403 and "nor its annotator pass" in answer.text
