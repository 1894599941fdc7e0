// How the server is launched: interpreter resolution and arguments from settings.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as path from "node:path";
import { mock, Uri } from "./vscode-mock";
import {
    FALLBACK_INTERPRETER,
    LaunchOptions,
    processFolder,
    resolveLaunch,
    sameLaunch,
    withPythonPath,
} from "../src/launch";
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

    it("runs `python3 -m dice_lsp --log-level INFO`, the interpreter's own, when nothing is configured", async () => {
        const launch = await resolveLaunch(undefined, undefined);
        assert.equal(launch.command, FALLBACK_INTERPRETER);
        assert.deepEqual(launch.args, ["-m", "dice_lsp", "--log-level", "INFO"]);
        assert.equal(launch.strategy, "fromEnvironment");
    });

    it("passes dice.logLevel to the server, and dice.importStrategy on", async () => {
        mock.settings.set("dice.logLevel", "debug");
        mock.settings.set("dice.importStrategy", "useBundled");
        mock.settings.set("dice.serverArgs", ["--log-file", "/tmp/dice.log"]);
        const launch = await resolveLaunch(undefined, undefined);
        assert.deepEqual(launch.args, ["-m", "dice_lsp", "--log-file", "/tmp/dice.log", "--log-level", "DEBUG"]);
        assert.equal(launch.strategy, "useBundled");
        mock.settings.set("dice.logLevel", "verbose"); // not a level: the default
        mock.settings.set("dice.importStrategy", "fromSomewhere");
        const fallback = await resolveLaunch(undefined, undefined);
        assert.deepEqual(fallback.args.slice(-2), ["--log-level", "INFO"]);
        assert.equal(fallback.strategy, "fromEnvironment");
    });

    it("prefers dice.interpreter over the Python extension's selection, and appends dice.serverArgs", async () => {
        mock.settings.set("dice.interpreter", " /opt/venv/bin/python ");
        mock.settings.set("dice.serverArgs", ["--log-level", "debug"]);
        const python = fakePython("/envs/selected/bin/python");
        const launch = await resolveLaunch(undefined, python);
        assert.equal(launch.command, "/opt/venv/bin/python");
        assert.deepEqual(launch.args, ["-m", "dice_lsp", "--log-level", "debug"], "serverArgs' own level wins");
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
        assert.deepEqual((await resolveLaunch(undefined, undefined)).args.slice(0, 3), ["-m", "dice_lsp", "-v"]);
    });

    it("compares launches by command and arguments", () => {
        const args = ["-m", "dice_lsp"];
        const a: LaunchOptions = { command: "python3", args, source: "fallback", strategy: "fromEnvironment" };
        const b: LaunchOptions = { ...a, strategy: "useBundled" };
        assert.ok(sameLaunch(a, { ...a, source: "dice.interpreter" }), "not where the interpreter came from");
        assert.ok(!sameLaunch(a, { ...a, args: ["-m", "dice_lsp", "-v"] }));
        assert.ok(!sameLaunch(a, b));
        assert.ok(!sameLaunch(a, undefined));
    });
});

describe("processFolder", () => {
    beforeEach(() => mock.reset());
    const home = { root: "/ext", storage: "/storage/dice", version: "0.1.0" };

    it("runs the interpreter in the workspace folder once it is trusted, else in the extension's storage", () => {
        const folder = Uri.file("/work/project");
        assert.equal(processFolder(folder, home), "/work/project");
        assert.equal(processFolder(undefined, home), undefined);
        mock.trusted = false;
        assert.equal(processFolder(folder, home), "/storage/dice");
    });

    it("puts a folder first on PYTHONPATH, before what was there", () => {
        assert.equal(withPythonPath({}, "/b").PYTHONPATH, "/b");
        assert.equal(withPythonPath({ PYTHONPATH: "/x", HOME: "/h" }, "/b").PYTHONPATH, `/b${path.delimiter}/x`);
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
