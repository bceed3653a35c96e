"""A report's index.html as a reader without JavaScript sees it: the standard library's HTML parser, which runs no
script, collects the page's text and its elements."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path


class PageReader(HTMLParser):
    """The text of a page (a list of text runs outside <script> and <style>) and every element with its attributes,
    in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.raw = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self.raw += tag in ("script", "style")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        self.raw -= tag in ("script", "style")

    def handle_data(self, data: str) -> None:
        if not self.raw and data.strip():
            self.texts.append(data)

    @property
    def text(self) -> str:
        return " ".join(self.texts)


def read_page(path: Path) -> PageReader:
    """Parse an HTML file (JavaScript off by construction)."""
    reader = PageReader()
    reader.feed(path.read_text(encoding="utf-8"))
    reader.close()
    return reader
