// A chat page on LangGraph's React `useStream` (`@langchain/langgraph-sdk/react`), unchanged,
// against `tea serve`: it sends a message, shows the streamed messages and events as they
// arrive, shows the run's pause (`interrupt`) with a button that answers it
// (`submit(undefined, { command: { resume: true } })`), then the final state. The server's
// address, its key and the agent are the page's query (`?api=…&key=…&assistant=chat`).
import { useStream } from "@langchain/langgraph-sdk/react";
import { useState } from "react";
import { createRoot } from "react-dom/client";

const query = new URLSearchParams(window.location.search);
const apiUrl = query.get("api") ?? "http://127.0.0.1:2024";
const apiKey = query.get("key") ?? undefined;
const assistantId = query.get("assistant") ?? "chat";

function App() {
  const [events, setEvents] = useState([]);
  const [threadId, setThreadId] = useState(null);
  const [text, setText] = useState("");
  const log = (line) => setEvents((seen) => [...seen, line]);
  const stream = useStream({
    apiUrl,
    apiKey,
    assistantId,
    threadId,
    onThreadId: setThreadId,
    messagesKey: "messages",
    // Each callback asks the server for its stream mode (`updates`, `custom`) besides `values`.
    onUpdateEvent: (update) => log(`updates: ${Object.keys(update).join(",")}`),
    onCustomEvent: (event) => log(`custom: ${JSON.stringify(event)}`),
    onError: (error) => log(`error: ${error?.message ?? error}`),
  });
  const send = (event) => {
    event.preventDefault();
    stream.submit({ messages: [{ type: "human", content: text }] }, { context: { user: "Ada" } });
    setText("");
  };
  const approve = () => stream.submit(undefined, { command: { resume: true } });
  const interrupt = stream.interrupt;
  const values = stream.values ?? {};
  return (
    <main>
      <h1>useStream on tea serve</h1>
      <p>
        thread <span id="thread">{threadId ?? "none"}</span>, <span id="status">{stream.isLoading ? "streaming" : "idle"}</span>
      </p>
      <ol id="messages">
        {stream.messages.map((message, i) => (
          <li key={message.id ?? i} data-type={message.type}>
            {typeof message.content === "string" ? message.content : JSON.stringify(message.content)}
          </li>
        ))}
      </ol>
      {interrupt && !stream.isLoading ? (
        <div className="interrupt" id="interrupt">
          <span id="question">{typeof interrupt.value === "string" ? interrupt.value : JSON.stringify(interrupt.value)}</span>{" "}
          <button id="approve" onClick={approve}>Approve</button>
        </div>
      ) : null}
      <form onSubmit={send}>
        <input id="message" value={text} onChange={(e) => setText(e.target.value)} placeholder="Say something" />
        <button id="send" type="submit" disabled={stream.isLoading}>Send</button>
      </form>
      <p>
        sent <span id="sent">{String(values.sent ?? 0)}</span>, approved <span id="approved">{String(values.approved ?? "")}</span>
      </p>
      {stream.error ? <p id="error">{String(stream.error?.message ?? stream.error)}</p> : null}
      <pre id="events">{events.join("\n")}</pre>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);
