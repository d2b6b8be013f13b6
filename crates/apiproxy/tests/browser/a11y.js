// A normalized text tree of the roles and accessible names under `arguments[0]` (a CSS selector),
// for the accessibility goldens: one line per element with a role, indented by depth, with
// aria-expanded / aria-disabled / aria-level / aria-selected; times, durations and counts of
// seconds replaced so the dump does not change from run to run.
const root = document.querySelector(arguments[0]);
if (!root) return `(no ${arguments[0]})`;
const implicit = (el) => {
  const tag = el.tagName.toLowerCase();
  switch (tag) {
    case 'a': return el.hasAttribute('href') ? 'link' : null;
    case 'button': return 'button';
    case 'ul': case 'ol': return 'list';
    case 'li': return 'listitem';
    case 'nav': return 'navigation';
    case 'form': return 'form';
    case 'h1': case 'h2': case 'h3': return 'heading';
    case 'section': return el.hasAttribute('aria-label') ? 'region' : null;
    case 'details': return 'group';
    case 'summary': return 'button';
    case 'time': return 'time';
    case 'dl': return 'list';
    case 'dt': return 'term';
    case 'dd': return 'definition';
    case 'input': {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      return { checkbox: 'checkbox', search: 'searchbox', number: 'spinbutton', password: 'textbox', text: 'textbox' }[type] || 'textbox';
    }
    default: return null;
  }
};
const volatile = (text) => text
  .replace(/\b\d{4}-\d\d-\d\dT[\d:.]+Z?\b/g, '<iso>')
  .replace(/\b(just now|\d+\s*(s|sec|min|h|d|day|days|hours?|minutes?|seconds?)\s+ago)\b/g, '<ago>')
  .replace(/\b\d+(\.\d+)?\s?(ms|s|min|m|h)\b/g, '<dur>')
  .replace(/reconnecting in \d+ s/g, 'reconnecting in <n> s');
const ownText = (el) => {
  // The element's text without the text of nested groups and lists (a treeitem's children).
  const clone = el.cloneNode(true);
  for (const nested of clone.querySelectorAll('[role="group"], ul, ol, pre.raw-json')) nested.remove();
  return clone.textContent.replace(/\s+/g, ' ').trim();
};
const name = (el, role) => {
  if (el.hasAttribute('aria-label')) return el.getAttribute('aria-label');
  if (el.id) {
    const label = document.querySelector(`label[for="${CSS.escape(el.id)}"]`);
    if (label) return label.textContent.trim();
  }
  if (role === 'time') return '<time>';
  if (['list', 'region', 'navigation', 'form', 'group'].includes(role)) return '';
  return ownText(el);
};
const lines = [];
const walk = (el, depth) => {
  if (el.hidden || el.getAttribute('aria-hidden') === 'true') return;
  const role = el.getAttribute('role') || implicit(el);
  let next = depth;
  if (role) {
    let line = `${'  '.repeat(depth)}${role}`;
    const label = volatile(name(el, role));
    if (label) line += ` ${JSON.stringify(label.length > 80 ? label.slice(0, 80) + '…' : label)}`;
    for (const attr of ['aria-level', 'aria-expanded', 'aria-disabled', 'aria-selected']) {
      if (el.hasAttribute(attr)) line += ` ${attr.slice(5)}=${el.getAttribute(attr)}`;
    }
    if (el.type === 'checkbox') line += ` checked=${el.checked}`;
    lines.push(line);
    next = depth + 1;
  }
  for (const child of el.children) walk(child, next);
};
walk(root, 0);
return lines.join('\n');
