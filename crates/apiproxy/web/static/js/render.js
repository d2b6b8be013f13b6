// DOM building without innerHTML: every stored value reaches the page as text.

/** An element with attributes (`class`, `dataset` entries as `data-*`, others as attributes) and children. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** The text of a message's content blocks (text parts, and the text inside tool results). */
export function messageText(message) {
  const parts = [];
  const walk = (blocks) => {
    for (const block of Array.isArray(blocks) ? blocks : []) {
      if (typeof block?.text === "string") parts.push(block.text);
      if (Array.isArray(block?.content)) walk(block.content);
    }
  };
  walk(message?.content);
  return parts.join("\n");
}

/** How one stored event is shown: `{kind, role, title, text}`. */
export function describeEvent(event) {
  const data = event.data ?? {};
  switch (event.type) {
    case "user/message":
      return { kind: "message", role: "user", title: "User", text: messageText(data) };
    case "assistant/message":
      return { kind: "message", role: "assistant", title: "Assistant", text: messageText(data.message) };
    case "turn/start":
      return { kind: "turn", title: `Turn ${data.turn ?? ""} started` };
    case "turn/end":
      return { kind: "turn", title: `Turn ${data.turn ?? ""} ended${reasonText(data.reason)}` };
    case "step/start":
      return { kind: "step", title: `Step ${data.step ?? ""}` };
    case "step/end":
      return { kind: "step", title: `Step ${data.step ?? ""} ended` };
    case "tool/call":
      return { kind: "tool", title: `Tool call ${data.name ?? ""}`, text: String(data.arguments ?? "") };
    case "tool/result":
      return { kind: "tool", title: `Tool result${data.error ? " (error)" : ""}`, text: messageText(data.message) };
    case "assistant/chunk":
      return { kind: "chunk", title: "Streamed chunk", text: typeof data.text === "string" ? data.text : "" };
    case "subagent/descriptor":
      return { kind: "step", title: `Subagent descriptor: ${data.mode ?? ""}${data.label ? ` · ${data.label}` : ""}` };
    default:
      return { kind: "other", title: event.type };
  }
}

function reasonText(reason) {
  if (!reason) return "";
  if (typeof reason === "string") return ` (${reason})`;
  const kind = reason.kind ?? reason.type;
  return kind ? ` (${kind})` : "";
}
