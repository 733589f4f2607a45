// The control API, as the page speaks it: every action is one of its requests, with the control token when the
// server has one (kept in this tab's sessionStorage, or given once as #token=... in the address).

const TOKEN_KEY = "forewarn-control-token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra = {}) {
  const found = token();
  return found ? { ...extra, authorization: `Bearer ${found}` } : extra;
}

export async function request(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "content-type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) {
    let code = "HTTP" + response.status;
    let message = response.statusText;
    try {
      const error = (await response.json()).error;
      code = error.code;
      message = error.message;
    } catch (_) { /* not the API's error shape */ }
    throw new ApiError(response.status, code, message);
  }
  return response;
}

// A surface's own answer, whatever its status (a 404 is an answer too: the metadata server's page for a key it does
// not have now). Only the control API's refusals (401, 400 for a bad request) are errors.
export async function answer(path) {
  const response = await fetch(path, { headers: headers() });
  if (response.status === 401 || (response.status === 400 && response.headers.get("content-type")?.startsWith("application/json"))) {
    const error = (await response.json()).error;
    throw new ApiError(response.status, error.code, error.message);
  }
  return { status: response.status, etag: response.headers.get("etag"), body: await response.text() };
}

export const get = async (path) => (await request("GET", path)).json();
export const post = async (path, body = {}) => (await request("POST", path, body)).json();

// Server-sent events read with fetch, not EventSource: EventSource cannot send the Authorization header.
export async function follow(onMessage, signal) {
  const response = await fetch("/v1/dashboard/stream", { headers: headers({ accept: "text/event-stream" }), signal });
  if (!response.ok) throw new ApiError(response.status, "HTTP" + response.status, "the live stream was refused");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5)).join("\n");
      if (data) onMessage(JSON.parse(data));
    }
  }
}
