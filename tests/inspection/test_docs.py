"""The generated tour exists, links only images that exist, and keeps them small valid PNGs."""

import re
from pathlib import Path

from .test_plots import assert_png

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_tour_images_exist_and_are_small():
    tour = (DOCS / "tour.md").read_text()
    images = re.findall(r"\]\((img/[^)]+\.png)\)", tour)
    assert len(images) >= 4
    for image in images:
        assert_png(DOCS / image, max_bytes=100_000)
    for step in ("Q, K, V", "Scaled scores", "Mask", "Softmax", "Residual + norm", "Logits", "Loss",
                 "Decoding"):
        assert step in tour
