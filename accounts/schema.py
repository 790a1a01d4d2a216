"""drf-spectacular extension: document BearerTokenAuthentication as the `bearerAuth` security scheme."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from accounts.permissions import API_TOKEN, accepted_credentials


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_requirement(self, auto_schema):
        """Only on operations that accept API tokens (`accepted_credentials`); None leaves it out."""
        if API_TOKEN not in accepted_credentials(auto_schema.view, auto_schema.method):
            return None
        return super().get_security_requirement(auto_schema)

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token: `Authorization: Bearer mem_…`."}
