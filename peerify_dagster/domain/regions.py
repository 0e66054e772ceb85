"""Boxes of a chunk or block on an image of its page.

`chunks.regions` and the regions of `parsed_manuscripts.blocks` are in PDF points from the page's top-left corner
on the page as displayed; `parsed_manuscripts.page_sizes` gives each page's width and height in the same points. An
image of the page rendered at any scale keeps the page's proportions, so one factor, image width over page width,
turns a region into pixels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from peerify_dagster.domain.layout.regions import Region

PixelBox = tuple[float, float, float, float]  # left, top, right, bottom in pixels from the image's top-left


def _region(value: Region | Mapping[str, Any]) -> Region:
    return value if isinstance(value, Region) else Region.from_record(value)


def regions_on_page(regions: Iterable[Region | Mapping[str, Any]], page: int) -> list[Region]:
    """The regions on `page` (1-based), from `Region`s or the lake's region structs."""
    return [region for region in map(_region, regions) if region.page == page]


def scale_regions(
    regions: Iterable[Region | Mapping[str, Any]],
    page_size: tuple[float, float] | Mapping[str, Any],
    image_width_px: float,
) -> list[PixelBox]:
    """The regions as pixel boxes on an image of their page `image_width_px` wide; `page_size` is the page's
    (width, height) in points or its `page_sizes` struct. Pass the regions of one page (`regions_on_page`)."""
    width = page_size["width"] if isinstance(page_size, Mapping) else page_size[0]
    if width <= 0 or image_width_px <= 0:
        raise ValueError(f"page width {width} pt and image width {image_width_px} px must both be positive")
    scale = image_width_px / width
    return [(r.x0 * scale, r.y0 * scale, r.x1 * scale, r.y1 * scale) for r in map(_region, regions)]
