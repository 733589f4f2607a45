// Swagger UI for the control API, from this server's own files; it sends the control token the dashboard keeps for
// this origin (sessionStorage), when there is one.
const openapi = document.currentScript.dataset.openapi;
window.ui = SwaggerUIBundle({
  url: openapi,
  dom_id: "#swagger-ui",
  requestInterceptor: (request) => {
    const token = sessionStorage.getItem("forewarn-control-token");
    if (token) request.headers.Authorization = `Bearer ${token}`;
    return request;
  },
});
