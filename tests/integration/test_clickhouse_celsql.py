"""CEL filters as SQL (server/query/cel_sql.c) on a real ClickHouse 18.16
and on a current one (chdb): each form's answer over a small label-set
table, hostile values and literals included, equals cel_eval's on the same
rows (the reference model, through build/tests/cel_sql_tool)."""

import json
import os
import subprocess
import sys

import pytest

from harness import BUILD, ROOT

TOOL = os.path.join(BUILD, "tests", "cel_sql_tool")
LONG = "x" * 100000 + "end"

HOSTS = ["node-1", "node-12", "a'b", "back\\slash", 'quote"d', "line\nbreak", "", LONG,
         "нода-1", "tab\tx", "x') OR 1=1 OR ('", "ab", "a\nb", "end\n"]
NUMS = ["5", "-2.5", "+7", "1e3", "abc", "1e999", "007", "3.", "", " 5", "0x10", "2E-1"]


def label_sets():
    rows = []
    i = 0
    for h in HOSTS:
        for n in NUMS[: 4 if h else len(NUMS)]:
            i += 1
            labels = [["host.name", h]]
            if n:
                labels.append(["n", n])
            if i % 3 == 0:
                labels.append(["k8s.namespace.name", "staging" if i % 2 else "prod"])
            if i % 4 == 1:
                labels.append(["k8s.pod.label[app]", "web"])
            if i % 5 == 2:
                labels.append(["k8s.namespace.name", "de"])  # a second key: first one wins
            rows.append({"id": i, "labels": labels})
    # keys in the order cel_eval's lookup (first match) and indexOf both see
    return rows


def cel(s):
    """A CEL string literal of s (cel.h: \\\\ \\" \\n \\t \\r escapes)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\t", "\\t").replace("\r", "\\r") + '"'


FORMS = [
    "true", "false", 'host.name == "node-1"', 'host.name != "node-1"',
    f"host.name == {cel(chr(39) + 'x')}", f"host.name == {cel('a' + chr(39) + 'b')}",
    f"host.name == {cel('back' + chr(92) + 'slash')}", f"host.name == {cel('quote' + chr(34) + 'd')}",
    f"host.name == {cel(HOSTS[10])}", f"host.name.contains({cel(chr(39))})",
    f"host.name.contains({cel(chr(92))})", f"host.name.contains({cel(chr(10))})",
    f"host.name.startsWith({cel('x' * 3000)})", f"host.name.endsWith({cel('end')})",
    'host.name in ["node-1", "a\'b", "нода-1"]', "host.name in []",
    '!(host.name == "node-1")', '!(host.name == "node-1") && host.name != ""',
    'k8s.namespace.name != "staging"', 'k8s.namespace.name == "staging" || n > 3',
    'k8s.pod.label["app"] == "web"', 'startsWith(host.name, "node")',
    "host.name.endsWith(k8s.namespace.name)", 'contains(host.name, "")',
    'false || host.name == ""',
    "n > 3", "n <= -2.5", "n == 7", "n != 5", 'n >= "1e3"', "n < 1", "3 < n", "n == n",
    "n > 1e300", "n != 0.2",
    'host.name.matches("^node-[0-9]+$")', 'host.name.matches("line.break")',
    'host.name.matches("a.b")', 'host.name.matches("^нода")', 'host.name.matches("^.{3}$")',
    'host.name.matches("(?i)NODE")', 'host.name.matches("\\\\\\\\")', 'host.name.matches("\'")',
    'host.name.matches("^$")', 'host.name.matches("[[:alpha:]]+-1$")', 'host.name.matches("end$")',
    'host.name.matches("^a$")', 'host.name.matches("d[$]")', 'host.name.matches("(d$|^b)")',
    'host.name.matches("[]$]")', 'host.name.matches("d\\\\$")',
]
UNSUPPORTED = [
    'host.name.matches("(?=x)")', 'host.name.matches("(a)\\\\1")', 'host.name.matches("a++")',
    'host.name.matches("(?<n>a)")', 'host.name.matches("(?>a)")', 'host.name.matches("(?<!a)b")',
    'host.name.matches("(?m)a$")', 'host.name.matches("(?im:a)")',
]


def tool(expr, rows):
    r = subprocess.run([TOOL, expr], input=json.dumps(rows), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}, r.stderr


def table_sql(rows, db):
    create = (f"CREATE TABLE {db}.ls (id UInt32, keys Array(String), values Array(String)) "
              "ENGINE = Memory")
    data = "\n".join(json.dumps({"id": r["id"], "keys": [k for k, _ in r["labels"]],
                                 "values": [v for _, v in r["labels"]]}) for r in rows)
    return create, f"INSERT INTO {db}.ls FORMAT JSONEachRow", data


def compiled(rows):
    out = []
    for form in FORMS:
        rc, ans, err = tool(form, rows)
        assert rc == 0, (form, rc, ans, err)
        out.append((form, ans["sql"], ans["ids"]))
    return out


def test_every_form_matches_cel_eval_on_18_16(clickhouse_cluster):
    a = clickhouse_cluster.servers[0]
    rows = label_sets()
    a.query("CREATE DATABASE IF NOT EXISTS celsql")
    create, insert, data = table_sql(rows, "celsql")
    a.query(create)
    a.query(insert, data=data.encode())
    assert a.query("SELECT count() FROM celsql.ls").strip() == str(len(rows))
    nonempty = 0
    for form, sql, ids in compiled(rows):
        got = [int(x) for x in a.query(f"SELECT id FROM celsql.ls WHERE {sql} ORDER BY id").split()]
        assert got == sorted(ids), (form, sql[:300])
        nonempty += bool(ids) and len(ids) < len(rows)
    # the forms split the rows, not all-or-nothing
    assert nonempty >= len(FORMS) // 2


def test_every_form_matches_cel_eval_on_current_clickhouse(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))
    from chdb import session
    rows = label_sets()
    s = session.Session(str(tmp_path / "chdb"))
    try:
        s.query("CREATE DATABASE IF NOT EXISTS celsql")
        create, insert, data = table_sql(rows, "celsql")
        s.query(create)
        s.query(insert + "\n" + data)
        for form, sql, ids in compiled(rows):
            got = [int(x) for x in str(s.query(f"SELECT id FROM celsql.ls WHERE {sql} ORDER BY id",
                                               "TSV")).split()]
            assert got == sorted(ids), (form, sql[:300])
    finally:
        s.close()


def test_unsupported_forms_are_named():
    for form in UNSUPPORTED:
        rc, ans, err = tool(form, [])
        assert rc == 3 and ans.get("unsupported"), (form, rc, ans, err)
        assert "no ClickHouse equivalent" in ans["error"], ans
    # an escaped backslash before a letter is a plain letter, not \K
    rc, ans, _ = tool('host.name.matches("\\\\\\\\K")', [])
    assert rc == 0, ans
