// The layers of src/ (npm run lint): no import cycles; the core imports nothing outside itself; the config layer
// imports only the core and the path normaliser, never the client, the object, the proxy or the adapters; the hono
// middleware imports only the package's public API.
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-circular",
      comment: "An import cycle: split the shared part into its own module.",
      severity: "error",
      from: {},
      to: { circular: true },
    },
    {
      name: "core-is-pure",
      comment: "src/core/ is the pure core (time passed in): it imports nothing outside itself.",
      severity: "error",
      from: { path: "^src/core/" },
      to: { pathNot: "^src/core/" },
    },
    {
      name: "config-below-client",
      comment: "The config layer is read by the client, the object and the adapters; it imports none of them.",
      severity: "error",
      from: { path: "^src/config/" },
      to: { path: "^src/", pathNot: "^src/(config/|core/|path[.]ts$)" },
    },
    {
      name: "path-is-pure",
      comment: "The path normaliser is pure and imports nothing.",
      severity: "error",
      from: { path: "^src/path[.]ts$" },
      to: { path: "^src/" },
    },
    {
      name: "protocol-below-client-and-object",
      comment: "The wire types between client and object import only the core: both sides read them.",
      severity: "error",
      from: { path: "^src/protocol[.]ts$" },
      to: { path: "^src/", pathNot: "^src/core/" },
    },
    {
      name: "hono-on-the-public-api",
      comment: "The hono middleware is built on the package's public API (src/index.ts) alone, as a user's would be.",
      severity: "error",
      from: { path: "^src/hono[.]ts$" },
      to: { path: "^src/", pathNot: "^src/index[.]ts$" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
  },
};
