/**
 * The dice-lsp server shipped in the extension: a wheel built from the repository when the extension is packaged
 * (scripts/wheel.sh), extracted once per extension version into its global storage and put first on the server's
 * PYTHONPATH (`dice.importStrategy`: useBundled). Its dependencies (torch, pygls, ...) come from the interpreter.
 */

import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { ExtensionHome, ProcessPlace } from "./launch";

/** Extracting a 30 MB wheel takes about a second; the cap only keeps a hung interpreter from holding the start. */
const EXTRACT_MS = 300_000;
const STAMP = ".dice-wheel";

/** The wheel shipped in `home` (bundled/dice_lsp-*.whl); undefined in a build made without it. */
export function shippedWheel(home: ExtensionHome): string | undefined {
    const folder = path.join(home.root, "bundled");
    const names = fs.existsSync(folder) ? fs.readdirSync(folder) : [];
    const wheels = names.filter((name) => /^dice_lsp-.+\.whl$/.test(name));
    return wheels.length > 0 ? path.join(folder, wheels.sort().at(-1) as string) : undefined;
}

/**
 * The folder that holds the shipped wheel's contents (dice_lsp/ and its dist-info), extracted with `python`'s own
 * zipfile (a wheel is a zip file; no zip library ships with the extension). Extracted once per extension version and
 * wheel, then reused; extracted beside and renamed into place, so two windows starting at once cannot see half of it.
 * Folders of other versions are removed. Throws an Error that says why it could not be extracted.
 */
export async function extractedBundle(home: ExtensionHome, python: string, place: ProcessPlace): Promise<string> {
    const wheel = shippedWheel(home);
    if (wheel === undefined) {
        throw new Error("this build of the extension ships no dice-lsp wheel (package it with `npm run package`)");
    }
    const parent = path.join(home.storage, "bundled");
    const target = path.join(parent, home.version);
    const stamp = wheelStamp(wheel);
    if (readStamp(target) === stamp) {
        return target;
    }
    fs.mkdirSync(parent, { recursive: true });
    const partial = fs.mkdtempSync(`${target}.partial-`);
    try {
        await unzip(python, wheel, partial, place);
        fs.writeFileSync(path.join(partial, STAMP), stamp);
        if (readStamp(target) === stamp) {
            fs.rmSync(partial, { recursive: true, force: true }); // another window was first
        } else {
            fs.rmSync(target, { recursive: true, force: true }); // another wheel of the same version (a rebuild)
            fs.renameSync(partial, target);
        }
    } catch (error) {
        fs.rmSync(partial, { recursive: true, force: true });
        if (readStamp(target) !== stamp) {
            throw error; // not a window that extracted the same wheel first
        }
    }
    removeOthers(parent, home.version);
    return target;
}

function unzip(python: string, wheel: string, folder: string, place: ProcessPlace): Promise<void> {
    return new Promise((resolve, reject) => {
        const args = ["-m", "zipfile", "-e", wheel, folder];
        execFile(python, args, { cwd: place.cwd, env: place.env, timeout: EXTRACT_MS }, (error, _out, err) => {
            if (error === null) {
                resolve();
            } else if ((error as NodeJS.ErrnoException).code === "ENOENT") {
                reject(new Error(`the interpreter \`${python}\` was not found`));
            } else {
                const last = err.trim().split("\n").pop();
                reject(new Error(`extracting the bundled dice-lsp failed: ${last || error.message}`));
            }
        });
    });
}

/** The wheel's name, size and time: a rebuilt wheel of the same version is extracted again. */
function wheelStamp(wheel: string): string {
    const stat = fs.statSync(wheel);
    return `${path.basename(wheel)} ${stat.size} ${Math.round(stat.mtimeMs)}\n`;
}

function readStamp(folder: string): string | undefined {
    try {
        return fs.readFileSync(path.join(folder, STAMP), "utf8");
    } catch {
        return undefined;
    }
}

/** Earlier versions' folders (an update leaves them behind); folders being extracted are left to their window. */
function removeOthers(parent: string, version: string): void {
    for (const name of fs.readdirSync(parent)) {
        if (name !== version && !name.includes(".partial-")) {
            fs.rmSync(path.join(parent, name), { recursive: true, force: true });
        }
    }
}
