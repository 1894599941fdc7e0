// The server shipped with the extension and the offer to install it, with real interpreters, the real wheel that
// scripts/wheel.sh built from this repository (`npm test` builds it first), real pip (kept off every index) and the
// real server; the editor's side is the stand-in for vscode.
import "./register-vscode";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import { mock, Uri } from "./vscode-mock";
import { extractedBundle, shippedWheel } from "../src/bundle";
import { INSTALL, pipInstall } from "../src/install";
import { withPythonPath } from "../src/launch";
import { probeServer } from "../src/probe";
import { FIXES } from "../src/server";
import {
    EXTENSION_ROOT,
    externallyManagedPython,
    hermeticPip,
    temporaryFolder,
    testHome,
    venvWithDependencies,
    session,
    venvWithPipOnly,
} from "./fixtures";

/** A cap on waiting for pip and the server, far above what they take (about 10 s here). */
const WAIT_MS = 240_000;

const wheel = shippedWheel(testHome("")) as string;

function log() {
    return vscode.window.createOutputChannel("DICE", { log: true });
}

/** The folder `python` imports dice_lsp from, in `env`; undefined when it cannot import it. */
function diceFolder(python: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
    try {
        const script = "import os, dice_lsp; print(os.path.dirname(dice_lsp.__file__))";
        const options = { env, cwd: EXTENSION_ROOT, encoding: "utf8", stdio: "pipe" } as const;
        return execFileSync(python, ["-c", script], options).trim();
    } catch {
        return undefined;
    }
}

/** Resolves once `condition` holds, checked every 50 ms; fails with `message()` after the cap. */
async function until(condition: () => boolean, message: () => string): Promise<void> {
    const deadline = Date.now() + WAIT_MS;
    while (!condition()) {
        if (Date.now() > deadline) {
            throw new Error(message());
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
    }
}

describe("the shipped wheel", () => {
    let folder: string;
    let bundle: string; // extracted once for the tests that only read it
    before(async () => {
        folder = temporaryFolder("dice-bundle-");
        bundle = await extractedBundle(testHome(path.join(folder, "shared")), "python3", { cwd: folder });
    });
    beforeEach(() => mock.reset());
    after(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("is built from this repository and holds dice_lsp, its engine and the bundled model", () => {
        assert.ok(wheel !== undefined, "no bundled/dice_lsp-*.whl: run scripts/wheel.sh");
        const listing = execFileSync("python3", ["-m", "zipfile", "-l", wheel], { encoding: "utf8" });
        for (const name of ["dice_lsp/__main__.py", "dice_lsp/engine/bundled/model.safetensors", "dice_lsp/harness/"]) {
            assert.ok(listing.includes(name), `the wheel lacks ${name}`);
        }
    });

    it("is extracted once per extension version, again when it changes, and earlier versions' folders go", async () => {
        const home = testHome(path.join(folder, "storage"));
        const old = path.join(home.storage, "bundled", "0.0.1");
        fs.mkdirSync(old, { recursive: true });
        const bundle = await extractedBundle(home, "python3", { cwd: folder });
        assert.equal(bundle, path.join(home.storage, "bundled", home.version));
        assert.equal(fs.existsSync(old), false);
        fs.writeFileSync(path.join(bundle, "sentinel"), "");
        assert.equal(await extractedBundle(home, "python3", { cwd: folder }), bundle);
        assert.ok(fs.existsSync(path.join(bundle, "sentinel")), "extracted again although nothing changed");
        fs.writeFileSync(path.join(bundle, ".dice-wheel"), "another wheel\n");
        await extractedBundle(home, "python3", { cwd: folder });
        assert.ok(!fs.existsSync(path.join(bundle, "sentinel")), "not extracted again for another wheel");
        assert.deepEqual(fs.readdirSync(path.join(home.storage, "bundled")), [home.version], "a partial one is left");
    });

    it("runs the real server from the extracted folder, ahead of the interpreter's own dice-lsp", () => {
        const env = withPythonPath(process.env, bundle);
        assert.equal(diceFolder("python3", env), path.join(bundle, "dice_lsp"));
        const options = { cwd: folder, env, encoding: "utf8" } as const;
        const help = execFileSync("python3", ["-m", "dice_lsp", "serve", "--help"], options);
        assert.match(help, /--log-level/);
    });

    it("says which of dice-lsp's requirements an interpreter lacks, and none of its extras", async () => {
        const place = { cwd: folder, env: withPythonPath(process.env, bundle) };
        const bare = await probeServer(venvWithPipOnly(path.join(folder, "bare")), EXTENSION_ROOT, place, true);
        assert.ok(bare.missing.includes("torch>=2.6") && bare.missing.includes("pygls>=2.0"), bare.missing.join(", "));
        assert.ok(!bare.missing.some((item) => /peft|pytest/.test(item)), bare.missing.join(", "));
        assert.match(bare.problem ?? "", /^it lacks what dice-lsp needs: .*torch>=2\.6/);
        const ready = await probeServer(venvWithDependencies(path.join(folder, "deps")), EXTENSION_ROOT, place, true);
        assert.equal(ready.problem, undefined);
        assert.equal(ready.origin, path.join(bundle, "dice_lsp"));
    });
});

// pip's success and its other failures are seen through the session below.
describe("pipInstall", () => {
    let folder: string;
    beforeEach(() => {
        mock.reset();
        folder = temporaryFolder("dice-pip-");
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("is refused by pip in an externally managed Python, which it says", async () => {
        const python = externallyManagedPython(folder);
        const place = { cwd: folder, env: hermeticPip() };
        const result = await pipInstall(python, wheel, place, log(), { breakSystemPackages: false });
        assert.equal(result.ok, false);
        assert.equal(result.externallyManaged, true, result.tail);
        assert.equal(diceFolder(python), undefined);
    });
});

describe("ServerSession's offer to install dice-lsp", { timeout: 2 * WAIT_MS }, () => {
    let folder: string;
    const saved = { ...process.env };
    before(() => {
        // pip inherits the extension host's environment: keep it off this machine's index and wheels.
        Object.assign(process.env, hermeticPip());
        for (const key of ["PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"]) {
            delete process.env[key];
        }
    });
    after(() => {
        for (const key of Object.keys(process.env)) {
            delete process.env[key];
        }
        Object.assign(process.env, saved);
    });
    beforeEach(() => {
        mock.reset();
        folder = temporaryFolder("dice-offer-");
        mock.workspaceFolders = [{ uri: Uri.file(folder), name: "project", index: 0 }];
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("installs into the interpreter with visible progress when asked, then starts the server", async () => {
        const python = venvWithDependencies(path.join(folder, "venv"));
        mock.settings.set("dice.interpreter", python);
        mock.answer = INSTALL;
        const current = session(path.join(folder, "storage"));
        await current.refresh("test");
        await until(() => current.running, () => `the server did not start; the log:\n${mock.output()}`);
        assert.deepEqual(mock.messages[0].items, [INSTALL, ...FIXES]);
        assert.equal(mock.messages.length, 1, "a message after the install");
        assert.equal(mock.progress.length, 1);
        assert.equal(mock.progress[0].title, `DICE: installing dice-lsp into ${python}`);
        assert.equal(mock.progress[0].cancellable, true);
        assert.ok(mock.progress[0].messages.some((line) => line.startsWith("Successfully installed dice-lsp")));
        assert.match(mock.output(), new RegExp(`starting the server \\(dice-lsp installed\\): ${python} -m dice_lsp`));
        assert.match(mock.output(), new RegExp(`dice_lsp from ${folder}/venv/.*site-packages/dice_lsp`));
        await current.stop();
    });

    it("names what the bundled server lacks, says why an install failed, and nothing else breaks", async () => {
        mock.settings.set("dice.importStrategy", "useBundled");
        mock.settings.set("dice.interpreter", venvWithPipOnly(folder));
        mock.answers = [INSTALL];
        const current = session(path.join(folder, "storage"));
        await current.refresh("test");
        assert.match(mock.messages[0].text, /the bundled DICE server: it lacks what dice-lsp needs: .*torch/);
        await until(() => mock.messages.length === 2, () => `no word on the install; the log:\n${mock.output()}`);
        assert.equal(mock.messages[1].kind, "error");
        assert.match(mock.messages[1].text, /^DICE: installing dice-lsp into `.*` failed: .*No matching distribution/);
        assert.deepEqual(mock.messages[1].items, ["Show logs"]);
        assert.equal(current.running, false);
        assert.match(mock.statusItems[0].text, /error/);
        // With an interpreter that has torch and the rest, the bundled server starts.
        mock.settings.set("dice.interpreter", "python3");
        await current.refresh("interpreter changed");
        assert.equal(current.running, true, mock.output());
        assert.match(mock.output(), new RegExp(`dice_lsp from ${folder}/storage/bundled/[^/]+/dice_lsp`));
        await current.stop();
    });

    it("asks before installing into an externally managed Python, and suggests a virtual environment", async () => {
        mock.settings.set("dice.interpreter", externallyManagedPython(folder));
        mock.commands.set("python.setInterpreter", () => undefined);
        mock.answers = [INSTALL, "Select interpreter"];
        const current = session(path.join(folder, "storage"));
        await current.refresh("test");
        await until(() => mock.messages.length === 2, () => `no question; the log:\n${mock.output()}`);
        assert.match(mock.messages[1].text, /externally managed Python \(PEP 668\).*python3 -m venv \.venv/);
        assert.deepEqual(mock.messages[1].items, ["Select interpreter", "Install anyway"]);
        await until(() => mock.executed.length === 1, () => "Select interpreter did nothing");
        assert.equal(mock.executed[0].command, "python.setInterpreter");
        assert.doesNotMatch(mock.output(), /installing: /, "pip ran without being asked to");
        assert.equal(mock.progress.length, 0);
        await current.stop();
    });
});
