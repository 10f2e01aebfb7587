"""Function names for a model: valid, unique across servers, and mapped back to (server, tool)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.mcp.toolbox import FUNCTION_NAME, ToolInfo, build_toolbox


def tools(*names: str) -> list[ToolInfo]:
    return [
        ToolInfo(n, f"does {n}", {"type": "object", "properties": {"x": {"type": "string"}}}) for n in names
    ]


def test_unique_valid_names_are_kept() -> None:
    box = build_toolbox([("time", tools("get_current_time")), ("files", tools("read_file", "list-dir"))])
    assert box.names() == ("get_current_time", "read_file", "list-dir")
    assert box.resolve("list-dir") == ("files", "list-dir")
    assert box.resolve("nope") is None


def test_a_shared_name_is_prefixed_on_every_server() -> None:
    box = build_toolbox([("a", tools("search", "only_a")), ("b.web", tools("search"))])
    assert box.names() == ("a__search", "only_a", "b_web__search")
    assert box.resolve("b_web__search") == ("b.web", "search")
    assert box.resolve("a__search") == ("a", "search")


def test_invalid_characters_and_long_names() -> None:
    long = "t" * 80
    box = build_toolbox([("s", tools("get weather!", long, "日本"))])
    assert box.names() == ("get_weather_", "t" * 64, "__")
    assert box.resolve("t" * 64) == ("s", long)


def test_clashes_left_after_cleaning_get_numbers() -> None:
    box = build_toolbox([("s", tools("a.b", "a b", "a_b"))])
    assert box.names() == ("s__a_b", "s__a_b_2", "s__a_b_3")
    assert [box.resolve(n) for n in box.names()] == [("s", "a.b"), ("s", "a b"), ("s", "a_b")]


def test_specs_are_openai_functions_and_fresh_copies() -> None:
    box = build_toolbox(
        [
            (
                "s",
                [
                    ToolInfo(
                        "f",
                        "Does f.",
                        {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                    ),
                    ToolInfo("g", "", {}),
                ],
            )
        ]
    )
    specs = box.specs()
    assert specs[0] == {
        "type": "function",
        "function": {
            "name": "f",
            "description": "Does f.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
    assert specs[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    specs[0]["function"]["parameters"]["properties"].clear()
    assert box.specs()[0]["function"]["parameters"]["properties"] == {"q": {"type": "string"}}


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=20), st.lists(st.text(min_size=1, max_size=90), max_size=6)),
        max_size=5,
        unique_by=lambda s: s[0],
    )
)
def test_names_are_always_valid_unique_and_resolve(servers: list[tuple[str, list[str]]]) -> None:
    box = build_toolbox([(server, tools(*names)) for server, names in servers])
    names = box.names()
    assert all(FUNCTION_NAME.match(n) for n in names)
    assert len(set(names)) == len(names)
    offered = {(server, n) for server, ns in servers for n in ns}
    assert {box.resolve(n) for n in names} == offered
