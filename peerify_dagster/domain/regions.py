"""Boxes of a chunk or block on an image of its page.

`chunks.regions` and the regions of `parsed_manuscripts.blocks` are in PDF points from the page's top-left corner
on the page as displayed; `parsed_manuscripts.page_sizes` gives each page's width and height in the same points. An
image of the page rendered at any scale keeps the page's proportions, so a region as percentages of the page's
width and height places it on the image at every scale (in pixels: those percentages of the image's width and
height), which is what a box drawn over the image needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from peerify_dagster.domain.layout.regions import Region

PercentBox = dict[str, float]  # left, top, width, height: percentages of the page's width and height
BOX_DECIMALS = 4  # of a percentage: a ten-thousandth of the page, far below a pixel


def _region(value: Region | Mapping[str, Any]) -> Region:
    return value if isinstance(value, Region) else Region.from_record(value)


def regions_on_page(regions: Iterable[Region | Mapping[str, Any]], page: int) -> list[Region]:
    """The regions on `page` (1-based), from `Region`s or the lake's region structs."""
    return [region for region in map(_region, regions) if region.page == page]


def page_sizes_of(parsed_manuscript: Mapping | None) -> dict[int, tuple[float, float]]:
    """Page number -> (width, height) in PDF points from a parsed_manuscripts row's `page_sizes`, when recorded (a
    page of no size cannot place a box)."""
    sizes = (parsed_manuscript or {}).get("page_sizes") or []
    return {size["page"]: (size["width"], size["height"]) for size in sizes if size["width"] and size["height"]}


def boxes_on_page(regions: Iterable[Region | Mapping[str, Any]] | None, page: int,
                  page_sizes: Mapping[int, tuple[float, float]]) -> list[PercentBox]:
    """The regions on `page` as percent boxes of that page (`page_sizes`: `page_sizes_of`), clipped to the page; a
    region wholly off the page is dropped, and a page of unknown size has no boxes."""
    if page not in page_sizes:
        return []
    width, height = page_sizes[page]
    boxes = []
    for region in regions_on_page(regions or [], page):
        left, top = max(region.x0, 0.0) / width, max(region.y0, 0.0) / height
        right, bottom = min(region.x1, width) / width, min(region.y1, height) / height
        if right > left and bottom > top:
            box = {"left": left, "top": top, "width": right - left, "height": bottom - top}
            boxes.append({name: round(100 * share, BOX_DECIMALS) for name, share in box.items()})
    return boxes


def pages_of(item: Mapping) -> list[int]:
    """The pages a placed item (a chunk, a citance, a passage) lies on: those of its regions, else the page it starts
    on."""
    pages = sorted({region["page"] for region in item.get("regions") or []})
    return pages or ([item["page"]] if item.get("page") is not None else [])
