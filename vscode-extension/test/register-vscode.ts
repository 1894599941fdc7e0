/**
 * Makes `require("vscode")` load the stand-in in ./vscode-mock, for the sources and for the bundled extension.
 * Import it before anything that imports `vscode`.
 */

import Module from "node:module";
import * as path from "node:path";

const mockPath = path.join(__dirname, "vscode-mock.js");
const internals = Module as unknown as { _resolveFilename: (request: string, ...rest: unknown[]) => string };
const resolve = internals._resolveFilename;
internals._resolveFilename = function (request: string, ...rest: unknown[]): string {
    return request === "vscode" ? mockPath : resolve.call(this, request, ...rest);
};
