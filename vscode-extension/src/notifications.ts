/**
 * The server's window/showMessage messages: each goes to the DICE log, and pops up only as `dice.showNotifications`
 * says (off / onError / onWarning / always). The commands learn from here whether the server already spoke while
 * they ran, so that a refusal is shown once.
 */

import * as vscode from "vscode";
import { MessageType, ShowMessageParams } from "vscode-languageclient/node";
import { SECTION } from "./settings";

export type NotificationSetting = "off" | "onError" | "onWarning" | "always";

/** The least urgent message type each setting pops up (MessageType: Error 1, Warning 2, Info 3, Log 4). */
const THRESHOLD: Record<NotificationSetting, number> = {
    off: 0,
    onError: MessageType.Error,
    onWarning: MessageType.Warning,
    always: Number.POSITIVE_INFINITY,
};

export class ServerMessages {
    private heard = 0;

    constructor(private readonly log: vscode.LogOutputChannel) {}

    /** A window/showMessage from the server. */
    fromServer(params: ShowMessageParams): void {
        this.heard += 1;
        this.notify(params.type, params.message);
    }

    /** A message of the server's kind (a command's refusal, say): logged, and popped up as the setting says. */
    notify(type: MessageType, text: string): void {
        void this.ask(type, text);
    }

    /**
     * `notify` with buttons: the one chosen, or undefined when the message was closed or did not pop up (the setting
     * keeps it in the log).
     */
    async ask(type: MessageType, text: string, ...items: string[]): Promise<string | undefined> {
        if (type === MessageType.Error) {
            this.log.error(text);
        } else if (type === MessageType.Warning) {
            this.log.warn(text);
        } else {
            this.log.info(text);
        }
        if (type > THRESHOLD[setting()]) {
            return undefined;
        }
        if (type === MessageType.Error) {
            return vscode.window.showErrorMessage(text, ...items);
        } else if (type === MessageType.Warning) {
            return vscode.window.showWarningMessage(text, ...items);
        }
        return vscode.window.showInformationMessage(text, ...items);
    }

    /** A mark for `heardSince`. */
    mark(): number {
        return this.heard;
    }

    /** Whether the server showed a message after `mark` was taken. */
    heardSince(mark: number): boolean {
        return this.heard > mark;
    }
}

function setting(): NotificationSetting {
    const value = vscode.workspace.getConfiguration(SECTION).get<unknown>("showNotifications");
    return typeof value === "string" && value in THRESHOLD ? (value as NotificationSetting) : "always";
}
