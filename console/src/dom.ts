// Small helpers that build the page from data: text always goes in as text, never as HTML.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  for (const child of children) if (child) element.append(child);
  return element;
}

/// A table with a head row of `head`, in a box that scrolls sideways when it is wider
/// than the page.
export function table(head: string[], rows: HTMLElement[], id = "") {
  const attributes: Record<string, string> = { class: "runs" };
  if (id) attributes.id = id;
  return el(
    "div",
    { class: "scroll" },
    el("table", attributes, el("thead", {}, el("tr", {}, ...head.map((name) => el("th", {}, name)))), el("tbody", {}, ...rows)),
  );
}

export function link(href: string, text: string, className = "") {
  return el("a", { href, class: className, "data-nav": "" }, text);
}

export function when(stamp: Timestamp | undefined) {
  if (!stamp) return "";
  return timestampDate(stamp).toLocaleString();
}

export function ago(stamp: Timestamp | undefined) {
  if (!stamp) return "";
  const seconds = Math.round((Date.now() - timestampDate(stamp).getTime()) / 1000);
  if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return timestampDate(stamp).toLocaleDateString();
}

export function problem(err: unknown) {
  const error = ConnectError.from(err);
  const text = `${Code[error.code]}: ${error.rawMessage}`;
  return el("p", { class: "problem", role: "alert" }, text);
}

export function isNotFound(err: unknown) {
  return ConnectError.from(err).code === Code.NotFound;
}
