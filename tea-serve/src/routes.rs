//! The router's table: every route of the JSON API and the handler that answers it — the
//! Agent Protocol's (`api.rs`, `store.rs`, `streaming.rs`) and LangGraph's (`langgraph.rs`).

use crate::error::ApiError;
use crate::{api, langgraph, store, streaming, Shared};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/agents/search", post(api::search_agents))
        .route("/agents/{agent_id}", get(api::get_agent))
        .route("/agents/{agent_id}/schemas", get(api::agent_schemas))
        .route("/assistants/search", post(langgraph::search_assistants))
        .route("/assistants/count", post(langgraph::count_assistants))
        .route("/assistants/{assistant_id}", get(langgraph::get_assistant))
        .route("/assistants/{assistant_id}/graph", get(langgraph::assistant_graph))
        .route("/assistants/{assistant_id}/schemas", get(langgraph::assistant_schemas))
        .route("/assistants/{assistant_id}/subgraphs", get(langgraph::assistant_subgraphs))
        .route("/threads", post(api::create_thread))
        .route("/threads/search", post(api::search_threads))
        .route("/threads/{thread_id}", get(api::get_thread).patch(api::patch_thread).delete(api::delete_thread))
        .route("/threads/{thread_id}/history", get(api::thread_history).post(langgraph::post_history))
        .route("/threads/{thread_id}/state", get(langgraph::get_state).post(langgraph::update_state))
        .route("/threads/{thread_id}/state/checkpoint", post(langgraph::post_state_at))
        .route("/threads/{thread_id}/state/{checkpoint_id}", get(langgraph::get_state_at))
        .route("/threads/{thread_id}/copy", post(api::copy_thread))
        .route("/threads/{thread_id}/stream", get(streaming::open_socket).post(streaming::open_stream))
        .route("/threads/{thread_id}/commands", post(streaming::command))
        .route("/threads/{thread_id}/runs", post(api::thread_run_background).get(langgraph::list_runs))
        .route("/threads/{thread_id}/runs/wait", post(api::thread_run_wait))
        .route("/threads/{thread_id}/runs/stream", post(api::thread_run_stream))
        .route(
            "/threads/{thread_id}/runs/{run_id}",
            get(langgraph::get_thread_run).delete(langgraph::delete_thread_run),
        )
        .route("/threads/{thread_id}/runs/{run_id}/join", get(langgraph::join_run))
        .route("/threads/{thread_id}/runs/{run_id}/stream", get(langgraph::join_stream))
        .route("/threads/{thread_id}/runs/{run_id}/cancel", post(langgraph::cancel_thread_run))
        .route("/runs", post(api::run_background))
        .route("/runs/wait", post(api::run_wait))
        .route("/runs/stream", post(api::run_stream))
        .route("/runs/search", post(api::search_runs))
        .route("/runs/{run_id}", get(api::get_run).delete(api::delete_run))
        .route("/runs/{run_id}/wait", get(api::wait_run))
        .route("/runs/{run_id}/stream", get(api::stream_run))
        .route("/runs/{run_id}/cancel", post(api::cancel_run))
        .route("/store/items", get(store::get_item).put(store::put_item).delete(store::delete_item))
        .route("/store/items/search", post(store::search_items))
        .route("/store/namespaces", post(store::list_namespaces))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
        })
}
