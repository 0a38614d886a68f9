// The floors of src/ (npm run lint), every arrow pointing down: base/ (imports nothing) and core/ (pure) at the
// bottom; config/ and protocol.ts on them; client/ and object/ side by side above; pipeline/ above the client; the
// adapters (index.ts over library/, hono.ts on the public API alone, proxy/) on top. No import cycles anywhere.
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
      name: "base-imports-nothing",
      comment: "src/base/ (the path normaliser, client addresses, errors, log lines) is the ground floor: it imports nothing else in src/.",
      severity: "error",
      from: { path: "^src/base/" },
      to: { path: "^src/", pathNot: "^src/base/" },
    },
    {
      name: "config-below-client",
      comment: "The config layer is read by the client, the object and the adapters; it imports none of them.",
      severity: "error",
      from: { path: "^src/config/" },
      to: { path: "^src/", pathNot: "^src/(config/|core/|base/)" },
    },
    {
      name: "client-below-pipeline",
      comment: "The client (the isolate side of a limiter) imports only what is below it, never the pipeline or the adapters.",
      severity: "error",
      from: { path: "^src/client/" },
      to: { path: "^src/", pathNot: "^src/(client/|config/|core/|base/|protocol[.]ts$)" },
    },
    {
      name: "object-beside-client",
      comment: "The Durable Object reads the core, the ground floor and the protocol: nothing of the isolate side.",
      severity: "error",
      from: { path: "^src/object/" },
      to: { path: "^src/", pathNot: "^src/(object/|core/|base/|protocol[.]ts$)" },
    },
    {
      name: "pipeline-below-adapters",
      comment: "The pipeline (identity, recording, response ends, HTTP answers) never imports an adapter.",
      severity: "error",
      from: { path: "^src/pipeline/" },
      to: { path: "^src/", pathNot: "^src/(pipeline/|client/|config/|core/|base/|protocol[.]ts$)" },
    },
    {
      name: "protocol-below-client-and-object",
      comment: "The wire types between client and object import only the core: both sides read them.",
      severity: "error",
      from: { path: "^src/protocol[.]ts$" },
      to: { path: "^src/", pathNot: "^src/core/" },
    },
    {
      name: "library-below-its-entry",
      comment: "The library (src/library/: settings, the Limiter, createLimiter) sits under src/index.ts and beside the other adapters: it imports none of them.",
      severity: "error",
      from: { path: "^src/library/" },
      to: { path: "^src/(index[.]ts$|hono[.]ts$|proxy/)" },
    },
    {
      name: "testing-is-a-leaf",
      comment: "The test kit (src/testing/, package export ./testing) is for tests: nothing else in src/ imports it, so no Worker built from the other entries can reach it.",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/testing/" },
      to: { path: "^src/testing/" },
    },
    {
      name: "testing-on-the-library",
      comment: "The test kit builds the library's limiter (src/library/create.ts) over objects in memory: never the runtime's modules (the object, the service, the adapters), so plain Node loads it.",
      severity: "error",
      from: { path: "^src/testing/" },
      to: { path: "^src/(object/|index[.]ts$|hono[.]ts$|proxy/|library/service[.]ts$)" },
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
