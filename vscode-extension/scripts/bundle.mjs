// Bundles src/extension.ts and its dependencies into dist/extension.js; `vscode` is provided by the editor.
// --production minifies and drops the source map (what the .vsix ships).
import * as esbuild from "esbuild";

const production = process.argv.includes("--production");

await esbuild.build({
    entryPoints: ["src/extension.ts"],
    outfile: "dist/extension.js",
    bundle: true,
    format: "cjs",
    platform: "node",
    target: "node18",
    external: ["vscode"],
    minify: production,
    sourcemap: !production,
    sourcesContent: false,
    logLevel: "warning",
});
