//! The OpenAPI document served at `GET /api/openapi.json`. Its paths come
//! from the `#[utoipa::path]` attributes of the handlers the router is
//! built from (see [`super::router`]), so a route cannot exist without its
//! documentation; this adds the title, the bearer-token scheme and tags.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document's fixed parts.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "weft",
        description = "weft's management and pull API. Every route but /health, /health/ready and POST /api/webhook_sources/{name} asks for `Authorization: Bearer <token>` when the config has api_tokens. Errors answer {\"summary\", \"validation_errors\"}. The pull routes are also served under /api/sequin_streams/{name}."
    ),
    modifiers(&BearerToken),
    security(("bearer" = []))
)]
pub(super) struct ApiDoc;

/// Declares the `bearer` security scheme.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
