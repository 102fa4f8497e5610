// Starts GraphiQL on index.html (in place of the inline script of Strawberry's page, which
// the Content-Security-Policy would refuse). Queries go to the page's own URL, without its
// query string: /graphql, or /laneway/graphql when a host mounts Laneway at /laneway;
// subscriptions to the same path over a websocket (graphql-transport-ws).
"use strict";

(function () {
  // The style elements GraphiQL's dialogs add (react-remove-scroll, through get-nonce) carry
  // the nonce this global holds; the policy admits no other inline style.
  window.__webpack_nonce__ = document.querySelector('meta[name="style-nonce"]').content;

  const EXAMPLE_QUERY = `# Laneway's GraphQL API. Run a query with Ctrl-Enter or the play button;
# the Docs and Explorer panels on the left list every field. With API tokens
# set, add {"Authorization": "Bearer <token>"} in the Headers tab below.

{
  workflows {
    name
  }
}
`;

  // The editors' contents live in the URL's query string (`q`, not `query`, which would make
  // the GET a GraphQL request), so a link shares a query.
  const parameters = new URLSearchParams(window.location.search);

  function remember(name, value) {
    if (value) {
      parameters.set(name, value);
    } else {
      parameters.delete(name);
    }
    const search = parameters.toString();
    history.replaceState(null, "", search ? "?" + search : window.location.pathname);
  }

  const endpoint = new URL(window.location.pathname, window.location.href);
  const socketEndpoint = new URL(endpoint);
  socketEndpoint.protocol = endpoint.protocol === "https:" ? "wss:" : "ws:";

  const fetcher = GraphiQL.createFetcher({
    url: endpoint.toString(),
    subscriptionUrl: socketEndpoint.toString(),
  });
  const explorer = GraphiQLPluginExplorer.explorerPlugin();

  function LanewayGraphiQL() {
    return React.createElement(GraphiQL, {
      fetcher: fetcher,
      plugins: [explorer],
      defaultQuery: EXAMPLE_QUERY,
      query: parameters.get("q") || undefined,
      variables: parameters.get("variables") || undefined,
      onEditQuery: (query) => remember("q", query),
      onEditVariables: (variables) => remember("variables", variables),
      defaultEditorToolsVisibility: true,
      inputValueDeprecation: true,
      isHeadersEditorEnabled: true,
      // Headers (a bearer token, say) stay with this tab (sessionStorage, as the dashboard
      // keeps its token), never in the URL nor in localStorage, where every later visit,
      // one from a link that pre-fills a mutation (?q=) too, would find and send them.
      storage: window.sessionStorage,
      shouldPersistHeaders: true,
    });
  }

  ReactDOM.createRoot(document.getElementById("graphiql")).render(
    React.createElement(LanewayGraphiQL),
  );
})();
