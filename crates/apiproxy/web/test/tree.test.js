import { test } from "node:test";
import assert from "node:assert/strict";
import { createTree } from "../static/js/tree.js";

const catalog = {
  root: [
    { kind: "child", id: "a", mode: "continuable", label: "A", activity: "inactive", hasChildren: true },
    { kind: "diagnostic", id: "d", reason: "corrupt" },
    { kind: "child", id: "b", mode: "one-shot", label: "B", activity: "running", hasChildren: false },
  ],
  a: [{ kind: "child", id: "a1", mode: "one-shot", label: "A1", activity: "inactive", hasChildren: false }],
};

function make() {
  const loads = [];
  const tree = createTree("root", async (id) => {
    loads.push(id);
    return catalog[id] || [];
  });
  return { tree, loads };
}
const ids = (tree) => tree.visible().map((n) => n.id);

test("children load lazily on expand; diagnostics are disabled and not expandable", async () => {
  const { tree, loads } = make();
  await tree.loadChildren("root");
  assert.deepEqual(ids(tree), ["a", "d", "b"]);
  assert.equal(tree.node("d").disabled, true);
  assert.equal(tree.expandable("d"), false);
  assert.equal(tree.expandable("b"), false);
  assert.deepEqual(loads, ["root"]);
  await tree.expand("a");
  assert.deepEqual(loads, ["root", "a"]);
  assert.deepEqual(ids(tree), ["a", "a1", "d", "b"]);
  assert.equal(tree.node("a1").level, 2);
  tree.collapse("a");
  await tree.expand("a");
  assert.deepEqual(loads, ["root", "a"], "a loaded branch is kept");
});

test("keyboard: Down/Up/Home/End walk the visible rows", async () => {
  const { tree } = make();
  await tree.loadChildren("root");
  assert.equal(tree.focused, "a");
  assert.deepEqual(tree.key("ArrowDown"), { focus: "d" });
  assert.deepEqual(tree.key("ArrowDown"), { focus: "b" });
  assert.deepEqual(tree.key("ArrowDown"), { focus: "b" });
  assert.deepEqual(tree.key("Home"), { focus: "a" });
  assert.deepEqual(tree.key("ArrowUp"), { focus: "a" });
  assert.deepEqual(tree.key("End"), { focus: "b" });
});

test("keyboard: Right expands then enters, Left collapses then goes to the parent", async () => {
  const { tree } = make();
  await tree.loadChildren("root");
  assert.deepEqual(tree.key("ArrowRight"), { expand: "a", focus: "a" });
  await tree.expand("a");
  assert.deepEqual(tree.key("ArrowRight"), { focus: "a1" });
  assert.deepEqual(tree.key("ArrowLeft"), { focus: "a" });
  assert.deepEqual(tree.key("ArrowLeft"), { focus: "a", collapsed: "a" });
  assert.deepEqual(ids(tree), ["a", "d", "b"]);
});

test("keyboard: Enter opens a child row, never a diagnostic", async () => {
  const { tree } = make();
  await tree.loadChildren("root");
  assert.deepEqual(tree.key("Enter"), { open: "a", mode: "continuable" });
  tree.focus("d");
  assert.equal(tree.key("Enter"), null);
});
