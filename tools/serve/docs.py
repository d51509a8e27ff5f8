"""GET /docs for `tools.serve`, offline: Swagger UI's three files from the swagger-ui-bundle
package, each at a fixed /docs/assets/<name> route (not the package's folder: its index.html
and swagger-initializer.js name petstore.swagger.io). No page or asset loads anything from
another host: Swagger UI's validator badge (validator.swagger.io) is turned off, and /redoc,
which only exists as a CDN page, is not served. Without the package, /docs is a short local
page pointing at /openapi.json and the pip command.
"""
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "favicon-32x32.png": "image/png"}
PREFIX = "/docs/assets"


def add_offline_docs(app) -> None:
    from pathlib import Path

    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import FileResponse, HTMLResponse

    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        import logging

        logging.getLogger("uvicorn.error").warning(
            "swagger-ui-bundle is not installed: /docs only links /openapi.json; "
            "pip install swagger-ui-bundle")

        @app.get("/docs", include_in_schema=False)
        async def no_docs():
            return HTMLResponse(f"<!DOCTYPE html><title>{app.title}</title><p>Swagger UI is not "
                                f"installed (<code>pip install swagger-ui-bundle</code>); the "
                                f"API's description is <a href='{app.openapi_url}'>"
                                f"{app.openapi_url}</a>.")
        return

    def route(path: Path, media_type: str):
        async def asset():
            return FileResponse(path, media_type=media_type)
        return asset

    for name, media_type in ASSETS.items():  # fixed names: no route takes a path
        app.add_api_route(f"{PREFIX}/{name}", route(Path(swagger_ui_path) / name, media_type),
                          include_in_schema=False)

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return get_swagger_ui_html(
            openapi_url=app.openapi_url, title=f"{app.title} - docs",
            swagger_js_url=f"{PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{PREFIX}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None})  # no validator.swagger.io badge
