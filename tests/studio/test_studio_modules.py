"""The Studio's pure modules, run in the browser: SSE parsing, DAG layout, schema form
reading, server error mapping, CSV parsing and log window stitching."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


@pytest.fixture
def modules(static_studio, page):
    page.goto(static_studio + "/#/nowhere")
    page.wait_for_selector("h1")
    return page


def run(page, body: str):
    return page.evaluate(f"async () => {{ {body} }}")


def test_sse_parser_handles_split_chunks_crlf_comments_and_multiline(modules):
    events = run(
        modules,
        """
        const { createParser } = await import('/js/sse.js');
        const seen = [];
        const parser = createParser((e) => seen.push(e));
        const text = ': heartbeat\\r\\n\\r\\nevent: log\\r\\nid: 7\\r\\ndata: {"a":\\r\\ndata: 1}\\r\\n\\r\\n'
          + 'event: result\\nid: 9\\ndata: {"success":true}\\n\\n' + 'data: tail';
        for (let i = 0; i < text.length; i += 3) parser.feed(text.slice(i, i + 3));
        parser.end();
        return seen;
        """,
    )
    assert events == [
        {"event": "log", "data": '{"a":\n1}', "id": "7"},
        {"event": "result", "data": '{"success":true}', "id": "9"},
        {"event": "message", "data": "tail", "id": "9"},
    ]


def test_dag_layout_layers_by_longest_path(modules):
    layout = run(
        modules,
        """
        const { layoutDag } = await import('/js/dag.js');
        const edges = [{from: 'a', to: 'b'}, {from: 'b', to: 'c'}, {from: 'a', to: 'c'},
                       {from: 'x', to: 'c'}, {from: 'c', to: 'a2'}];
        const l = layoutDag(['a', 'b', 'c', 'x', 'a2', 'lonely'], edges);
        const cyc = layoutDag(['p', 'q'], [{from: 'p', to: 'q'}, {from: 'q', to: 'p'}]);
        return { layers: l.layers, cycle: cyc.layers.flat().sort(),
                 xs: Object.fromEntries([...l.positions].map(([k, v]) => [k, v.x])) };
        """,
    )
    layer_of = {node: i for i, layer in enumerate(layout["layers"]) for node in layer}
    assert layer_of["a"] == 0 and layer_of["x"] == 0 and layer_of["lonely"] == 0
    assert layer_of["b"] == 1 and layer_of["c"] == 2 and layer_of["a2"] == 3
    assert layout["xs"]["a"] < layout["xs"]["b"] < layout["xs"]["c"] < layout["xs"]["a2"]
    assert layout["cycle"] == ["p", "q"]


def test_schema_fields_read_and_validate(modules):
    result = run(
        modules,
        """
        const { describeFields, readField, parseServerErrors } = await import('/js/schemaform.js');
        const schema = {
          type: 'object', required: ['n', 'mode'],
          properties: {
            n: {type: 'integer', minimum: 1, maximum: 5},
            ratio: {anyOf: [{type: 'number', exclusiveMinimum: 0}, {type: 'null'}], default: null},
            mode: {$ref: '#/$defs/Mode'},
            name: {anyOf: [{type: 'string'}, {type: 'null'}], default: null},
            globs: {type: 'string', default: '**/*'},
            flag: {type: 'boolean', default: false},
            tags: {type: 'array', items: {type: 'string'}},
          },
          $defs: {Mode: {enum: ['fast', 'slow'], type: 'string', title: 'Mode'}},
        };
        const f = Object.fromEntries(describeFields(schema).map((d) => [d.name, d]));
        const server = parseServerErrors(
          'ValidationError: 2 validation errors for X\\nn\\n  Input should be greater than 0 [type=greater_than]\\n'
          + 'name\\n  Value error, bad name [type=value_error, input_value=1]\\n', new Set(['n', 'name']));
        const oneLine = parseServerErrors(
          "ValueError: Invalid input for task demo: x: Field required; task_name: Value error, "
          + "Invalid task_name 'a b': use letters; y: Input should be a valid integer", new Set(['x', 'y', 'task_name']));
        return {
          kinds: Object.fromEntries(Object.entries(f).map(([k, d]) => [k, [d.kind, d.nullable]])),
          n: [readField(f.n, ''), readField(f.n, '2.5'), readField(f.n, '9'), readField(f.n, ' 3 ')],
          ratio: [readField(f.ratio, ''), readField(f.ratio, '0'), readField(f.ratio, '1e-3')],
          mode: [readField(f.mode, ''), readField(f.mode, '1')],
          globs: [readField(f.globs, ''), readField(f.globs, '*.csv')],
          name: readField(f.name, ''),
          flag: readField(f.flag, true),
          tags: [readField(f.tags, '["a"]'), 'error' in readField(f.tags, '[')],
          server: {fields: Object.fromEntries(server.fields), general: server.general},
          oneLine: {fields: Object.fromEntries(oneLine.fields), general: oneLine.general},
        };
        """,
    )
    assert result["kinds"] == {
        "n": ["integer", False], "ratio": ["number", True], "mode": ["enum", False],
        "name": ["string", True], "globs": ["string", False], "flag": ["boolean", False],
        "tags": ["json", False],
    }  # fmt: skip
    assert result["n"] == [
        {"error": "Required."}, {"error": "Enter a whole number."},
        {"error": "Must be at most 5."}, {"value": 3},
    ]  # fmt: skip
    assert result["ratio"] == [
        {"omit": True},
        {"error": "Must be greater than 0."},
        {"value": 0.001},
    ]
    assert result["mode"] == [{"error": "Required."}, {"value": "slow"}]
    assert result["globs"] == [{"value": ""}, {"value": "*.csv"}]
    assert result["name"] == {"omit": True}
    assert result["flag"] == {"value": True}
    assert result["tags"] == [{"value": ["a"]}, True]
    assert result["server"]["fields"] == {"n": "Input should be greater than 0", "name": "bad name"}
    assert result["oneLine"] == {
        "fields": {
            "x": "Field required",
            "task_name": "Invalid task_name 'a b': use letters",
            "y": "Input should be a valid integer",
        },
        "general": "Invalid input for task demo",
    }


def test_csv_and_log_window_helpers(modules):
    result = run(
        modules,
        '''
        const { parseCsv, previewKind } = await import('/js/views/files.js');
        const { sliceBytes } = await import('/js/views/logview.js');
        return {
          csv: parseCsv('a,b\\r\\n"x, y","say ""hi"""\\n1,\\n', ','),
          capped: parseCsv('h\\n1\\n2\\n3\\n', ',', 2),
          kinds: ['a.PNG', 'd/x.json', 'r.tsv', 'n.md', 'blob.bin', 'noext'].map((p) => previewKind(p)),
          typed: previewKind('upload', 'text/csv'),
          slice: [sliceBytes('héllo wörld', 100, 103, 112), sliceBytes('abc', 10, 10, 13)],
        };
        ''',
    )
    assert result["csv"] == [["a", "b"], ["x, y", 'say "hi"'], ["1", ""]]
    assert result["capped"] == [["h"], ["1"]]
    assert result["kinds"] == ["image", "json", "csv", "text", None, None]
    assert result["typed"] == "csv"
    assert result["slice"] == ["llo wörl", "abc"]
