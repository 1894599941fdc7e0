// How the server is launched: interpreter resolution and arguments from settings.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import { mock, Uri } from "./vscode-mock";
import { FALLBACK_INTERPRETER, resolveLaunch, sameLaunch } from "../src/launch";
import { PythonEnvironments, pythonEnvironments } from "../src/python";

function fakePython(executable: string | undefined): PythonEnvironments & { asked: unknown[] } {
    const asked: unknown[] = [];
    return {
        asked,
        getActiveEnvironmentPath: (resource) => {
            asked.push(resource?.toString());
            return { id: "env", path: "/envs/selected" };
        },
        resolveEnvironment: async () => ({ executable: { uri: executable === undefined ? undefined : Uri.file(executable) } }),
        onDidChangeActiveEnvironmentPath: () => ({ dispose: () => undefined }),
    };
}

describe("resolveLaunch", () => {
    beforeEach(() => mock.reset());

    it("runs `python3 -m dice_lsp` when nothing is configured and no Python extension is installed", async () => {
        const launch = await resolveLaunch(undefined, undefined);
        assert.equal(launch.command, FALLBACK_INTERPRETER);
        assert.deepEqual(launch.args, ["-m", "dice_lsp"]);
    });

    it("prefers dice.interpreter over the Python extension's selection, and appends dice.serverArgs", async () => {
        mock.settings.set("dice.interpreter", " /opt/venv/bin/python ");
        mock.settings.set("dice.serverArgs", ["--log-level", "debug"]);
        const python = fakePython("/envs/selected/bin/python");
        const launch = await resolveLaunch(undefined, python);
        assert.equal(launch.command, "/opt/venv/bin/python");
        assert.deepEqual(launch.args, ["-m", "dice_lsp", "--log-level", "debug"]);
        assert.equal(python.asked.length, 0);
    });

    it("uses the interpreter selected in the Python extension for the workspace folder", async () => {
        const folder = Uri.file("/work/project");
        const launch = await resolveLaunch(folder, fakePython("/envs/selected/bin/python"));
        assert.equal(launch.command, "/envs/selected/bin/python");
        assert.equal(launch.source, "Python extension");
    });

    it("falls back to python3 when the Python extension has no resolvable interpreter", async () => {
        const launch = await resolveLaunch(undefined, fakePython(undefined));
        assert.equal(launch.command, FALLBACK_INTERPRETER);
    });

    it("does not run the Python extension's selection in an untrusted workspace", async () => {
        mock.trusted = false;
        const python = fakePython("/work/project/.venv/bin/python");
        const launch = await resolveLaunch(undefined, python);
        assert.equal(launch.command, FALLBACK_INTERPRETER);
        assert.equal(python.asked.length, 0);
    });

    it("ignores serverArgs entries that are not strings", async () => {
        mock.settings.set("dice.serverArgs", ["-v", 3, null]);
        assert.deepEqual((await resolveLaunch(undefined, undefined)).args, ["-m", "dice_lsp", "-v"]);
    });

    it("compares launches by command and arguments", () => {
        const a = { command: "python3", args: ["-m", "dice_lsp"], source: "fallback" };
        assert.ok(sameLaunch(a, { ...a, source: "dice.interpreter" }));
        assert.ok(!sameLaunch(a, { ...a, args: ["-m", "dice_lsp", "-v"] }));
        assert.ok(!sameLaunch(a, undefined));
    });
});

describe("pythonEnvironments", () => {
    beforeEach(() => mock.reset());

    it("is undefined without the Python extension", async () => {
        assert.equal(await pythonEnvironments(), undefined);
    });

    it("activates the Python extension and returns its environments API", async () => {
        const environments = fakePython("/usr/bin/python3");
        let activated = 0;
        mock.extensions.set("ms-python.python", {
            isActive: false,
            exports: undefined,
            activate: async () => {
                activated += 1;
                return { environments };
            },
        });
        assert.equal(await pythonEnvironments(), environments);
        assert.equal(activated, 1);
    });
});
