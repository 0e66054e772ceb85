"""The catalog's views come from the asset graph: one per table, none for what must stay unreadable."""

from __future__ import annotations

from peerify_dagster.definitions import defs
from peerify_dagster.resources.lake import NO_VIEW, SQL_DIR, TABLE_VIEW, catalog_views


def test_every_table_of_the_graph_has_a_view_but_the_ones_kept_out():
    graph = defs.resolve_asset_graph()
    assets = {key.to_user_string() for key in graph.get_all_asset_keys()}
    views = catalog_views()
    assert set(NO_VIEW) <= assets  # a stale name here would hide nothing
    assert assets - set(views) == set(NO_VIEW)
    assert "arbitration_key" not in views  # blinding: which labeller is which candidate
    assert views["reviews"] == TABLE_VIEW.format(table="reviews")
    assert set(views) - assets == {path.stem for path in SQL_DIR.glob("*.sql")} == {"llm_calls"}
    assert "distinct on (call_id, created_at)" in views["llm_calls"]
