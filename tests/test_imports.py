"""No import circle anywhere in the package. The import-linter contract in pyproject.toml
forbids circles among the modules and subpackages of every package (`make layers`); this test
also catches the one it cannot see, between a package's ``__init__`` and a module inside it.
Imports inside functions count: a circle hidden there is still one."""

import grimp


def test_no_module_is_part_of_an_import_circle():
    graph = grimp.build_graph("transformer_jax", cache_dir=None)
    circles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                circles.append(" -> ".join((module, *back)))
    assert circles == []
