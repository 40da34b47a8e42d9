"""An import-linter contract type for a door on part of an external package.

import-linter's own ``forbidden`` and ``protected`` contracts see an external package only whole
(``faust``, never ``faust.transport``): the graph keeps one node per external root. The Kafka door
is narrower than that (the projector hosts Faust apps; only ``keel_stream.kafka`` may touch
Faust's transport), so this contract reads the import statements themselves.

    [[tool.importlinter.contracts]]
    type = "external_submodule"
    external_module = "faust.transport"
    allowed_importers = ["keel_stream.kafka"]
"""

from __future__ import annotations

import re

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.application import contract_utils
from importlinter.domain.helpers import module_expressions_to_modules

__all__ = ["ExternalSubmoduleContract"]


class ExternalSubmoduleContract(Contract):
    """Only ``allowed_importers`` (and their descendants) import ``external_module``."""

    type_name = "external_submodule"

    external_module = fields.StringField()
    allowed_importers = fields.ListField(subfield=fields.ModuleExpressionField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(
        contract_utils.AlertLevel, default=contract_utils.AlertLevel.ERROR
    )

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=self.unmatched_ignore_imports_alerting,  # type: ignore[arg-type]
        )
        external = str(self.external_module)
        root = external.split(".")[0]
        names = re.compile(rf"\b{re.escape(external)}\b")
        allowed = {
            module.name
            for module in module_expressions_to_modules(
                graph,
                self.allowed_importers,  # type: ignore[arg-type]
                as_packages=True,
            )
        }
        found: list[str] = []
        for importer in sorted(graph.find_modules_that_directly_import(root)):
            if importer in allowed:
                continue
            for detail in graph.get_import_details(importer=importer, imported=root):
                if names.search(str(detail["line_contents"])):
                    found.append(f"{importer}:{detail['line_number']} {detail['line_contents']}")
        return ContractCheck(
            kept=not found,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"found": found},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["found"]:
            output.print_error(f"- {line}")
