"""The report as plain data: sections holding blocks, rendered by ``render``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .tables import Table, TextTable


@dataclass
class Paragraph:
    text: str                   # plain text (escaped by the renderer)


@dataclass
class Banner(Paragraph):
    """A warning that must not be missed (e.g. smoke-profile numbers): boxed in HTML, bold in markdown."""


@dataclass
class Bullets:
    items: list[str]


@dataclass
class KeyValues:
    items: list[tuple[str, str]]


@dataclass
class Definitions:
    items: list[tuple[str, str]]   # (term, definition), plain text with unicode formulas


@dataclass
class Figure:
    name: str                   # file stem under figures/ (unique within a report)
    png: bytes
    caption: str
    alt: str = ""


Block = Union[Paragraph, Bullets, KeyValues, Definitions, Figure, Table, TextTable, "Section"]


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)
    anchor: str = ""

    def add(self, block) -> None:
        if block is not None:
            self.blocks.append(block)


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        out = []

        def walk(blocks):
            for b in blocks:
                if isinstance(b, Figure):
                    out.append(b)
                elif isinstance(b, Section):
                    walk(b.blocks)

        walk(self.sections)
        return out
