"""Writes cmrc_small.json (Chinese reading comprehension in the SQuAD v1.1 layout) and
cmrc_eval.json / cmrc_eval_predictions.json (gold answers and predictions for the CMRC 2018
metric).

    python tests/data/chinese/make_chinese_squad.py

Our own text, in the manner of CMRC 2018 (simplified) and DRCD (traditional): unspaced
Chinese with numbers (2018年, 3.5%), Latin names and words inside Chinese (Tim Cook, iPhone),
full-width characters (ＮＢＡ, ２０２０), and Chinese punctuation (，。《》「」、). Each question
has one answer, given with the occurrence of the answer text in its context; `answer_start`
is computed from it. The metric file has one question per item of `EVAL_ITEMS`, with one or
more gold answers, and a prediction for all but one.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# (title, context, [(question id, question, answer, occurrence of the answer in the context)])
PARAGRAPHS = [
    ("长江", "长江是亚洲第一长河，全长约6300公里，发源于青藏高原的唐古拉山脉，自西向东流经11个"
     "省级行政区，最后在上海注入东海。",
     [("zh-01", "长江全长约多少公里？", "6300公里", 0),
      ("zh-02", "长江在哪里注入东海？", "上海", 0)]),
    ("苹果公司", "苹果公司（Apple Inc.）总部位于美国加州库比蒂诺。2011年，蒂姆·库克（Tim Cook）"
     "接替乔布斯出任首席执行官，同年发布了iPhone 4S。",
     [("zh-03", "谁在2011年接替乔布斯出任首席执行官？", "Tim Cook", 0),
      ("zh-04", "苹果公司同年发布了什么手机？", "iPhone 4S", 0)]),
    ("篮球", "２０２０年，ＮＢＡ总决赛在奥兰多的封闭园区举行，湖人队以4比2击败热火队，勒布朗·"
     "詹姆斯第四次获得总决赛最有价值球员。",
     [("zh-05", "哪一年的总决赛在封闭园区举行？", "２０２０年", 0),
      ("zh-06", "湖人队以几比几击败热火队？", "4比2", 0)]),
    ("三体", "刘慈欣的长篇小说《三体》于2006年开始在《科幻世界》杂志连载，2015年获得第73届雨果奖"
     "最佳长篇小说奖，是首部获得该奖的亚洲作品。",
     [("zh-07", "《三体》在哪本杂志上连载？", "《科幻世界》", 0),
      ("zh-08", "《三体》获得了第几届雨果奖？", "第73届", 0)]),
    ("Python", "Python是一种广泛使用的编程语言，由Guido van Rossum于1991年首次发布。"
     "Python 3.12版本在2023年10月推出，解释器的运行速度比旧版本提高了约5%。",
     [("zh-09", "Python由谁首次发布？", "Guido van Rossum", 0),
      ("zh-10", "Python 3.12版本在什么时候推出？", "2023年10月", 0)]),
    ("故宫", "北京故宫是明清两代的皇家宫殿，旧称紫禁城，始建于明成祖永乐四年（1406年），"
     "占地面积约72万平方米，现为故宫博物院。",
     [("zh-11", "故宫旧称什么？", "紫禁城", 0),
      ("zh-12", "故宫占地面积约多少？", "72万平方米", 0)]),
    ("臺北101", "臺北101是位於臺灣臺北市信義區的摩天大樓，樓高508公尺，地上101層，"
     "於2004年落成，曾是世界第一高樓。",
     [("zh-13", "臺北101樓高多少公尺？", "508公尺", 0),
      ("zh-14", "臺北101位於哪一個區？", "信義區", 0)]),
    ("熊貓", "大熊貓是中國特有的哺乳動物，主要棲息在四川、陝西和甘肅的山區，以竹子為主要食物，"
     "成年個體每天要吃12到38公斤的竹子。",
     [("zh-15", "大熊貓以什麼為主要食物？", "竹子", 0),
      ("zh-16", "成年大熊貓每天要吃多少竹子？", "12到38公斤", 0)]),
    ("高铁", "京沪高速铁路全长1318公里，于2011年6月30日正式开通运营，复兴号列车的最高运营"
     "时速为350公里，北京南站到上海虹桥站最快只需4小时18分。",
     [("zh-17", "京沪高铁于哪一天正式开通运营？", "2011年6月30日", 0),
      ("zh-18", "北京南站到上海虹桥站最快需要多长时间？", "4小时18分", 0)]),
    ("诺贝尔奖", "屠呦呦因发现青蒿素而获得2015年诺贝尔生理学或医学奖，她是第一位获得诺贝尔"
     "科学类奖项的中国本土科学家。她与William C. Campbell和大村智分享了该奖项。",
     [("zh-19", "屠呦呦因发现什么而获奖？", "青蒿素", 0),
      ("zh-20", "屠呦呦与哪位外国科学家分享了该奖项？", "William C. Campbell", 0)]),
    ("茶", "中国是茶的故乡，茶叶按加工方法可分为绿茶、红茶、乌龙茶、白茶、黄茶和黑茶六大类。"
     "西湖龙井属于绿茶，主要产于浙江杭州。",
     [("zh-21", "西湖龙井属于哪一类茶？", "绿茶", 1),
      ("zh-22", "西湖龙井主要产于哪里？", "浙江杭州", 0)]),
    ("嫦娥五号", "嫦娥五号探测器于2020年11月24日在文昌航天发射场由长征五号遥五运载火箭发射，"
     "12月17日携带1731克月球样品返回地球。",
     [("zh-23", "嫦娥五号带回了多少克月球样品？", "1731克", 0),
      ("zh-24", "嫦娥五号由什么火箭发射？", "长征五号遥五运载火箭", 0)]),
    ("鄭和", "鄭和是明朝的航海家，1405年至1433年間率領船隊七次下西洋，最遠到達東非沿岸，"
     "船隊規模最大時有兩萬七千多人。",
     [("zh-25", "鄭和率領船隊下西洋共幾次？", "七次", 0),
      ("zh-26", "鄭和的船隊最遠到達哪裡？", "東非沿岸", 0)]),
    ("华为", "华为技术有限公司成立于1987年，总部位于广东深圳。2019年，华为发布了自主研发的"
     "操作系统「鸿蒙」（HarmonyOS），并计划用于手机和物联网设备。",
     [("zh-27", "华为总部位于哪里？", "广东深圳", 0),
      ("zh-28", "华为发布的操作系统英文名是什么？", "HarmonyOS", 0)]),
    ("珠穆朗玛峰", "珠穆朗玛峰是世界最高峰，2020年中尼两国共同宣布其最新高程为8848.86米。"
     "1953年5月29日，Edmund Hillary与丹增·诺尔盖首次登顶。",
     [("zh-29", "珠穆朗玛峰的最新高程是多少？", "8848.86米", 0),
      ("zh-30", "1953年与丹增·诺尔盖一起首次登顶的是谁？", "Edmund Hillary", 0)]),
    ("奥运会", "2008年夏季奥运会在北京举行，共有204个国家和地区的运动员参赛。"
     "牙买加选手Usain Bolt在男子100米决赛中以9.69秒打破世界纪录。",
     [("zh-31", "2008年奥运会共有多少个国家和地区参赛？", "204个", 0),
      ("zh-32", "Usain Bolt在100米决赛中跑出了多少秒？", "9.69秒", 0)]),
    ("豆腐", "豆腐相传由西汉淮南王刘安发明，制作时先将黄豆浸泡、磨浆，再加入石膏或卤水使豆浆"
     "凝固，每100克豆腐约含8克蛋白质。",
     [("zh-33", "相传豆腐由谁发明？", "刘安", 0),
      ("zh-34", "每100克豆腐约含多少蛋白质？", "8克", 0)]),
    ("台灣高鐵", "台灣高鐵於2007年1月5日通車，連接台北與高雄，全長約350公里，"
     "列車最高營運時速為300公里，採用日本新幹線700T型列車。",
     [("zh-35", "台灣高鐵哪一天通車？", "2007年1月5日", 0),
      ("zh-36", "台灣高鐵採用哪一型列車？", "700T型", 0)]),
    ("敦煌", "敦煌莫高窟始建于十六国时期，现存洞窟735个、壁画4.5万平方米，1987年被列入"
     "《世界遗产名录》。",
     [("zh-37", "莫高窟现存多少个洞窟？", "735个", 0),
      ("zh-38", "莫高窟哪一年被列入世界遗产名录？", "1987年", 0)]),
    ("电动汽车", "2022年中国新能源汽车销量达到688.7万辆，同比增长93.4%，其中比亚迪（BYD）"
     "以约186万辆的销量位居全球第一。",
     [("zh-39", "2022年中国新能源汽车销量是多少？", "688.7万辆", 0),
      ("zh-40", "哪家公司销量位居全球第一？", "比亚迪（BYD）", 0)]),
]


# The metric file: (question id, gold answers, prediction; None: the question is not answered).
EVAL_ITEMS = [
    ("e01", ["上海"], "上海"),
    ("e02", ["《三体》"], "三体"),                    # 《》 are removed for EM
    ("e03", ["浙江杭州"], "杭州"),
    ("e04", ["2011年"], "于2011年6月"),
    ("e05", ["Tim Cook"], "tim cook"),
    ("e06", ["Tim Cook"], "Cook"),
    ("e07", ["ＮＢＡ总决赛"], "ｎｂａ总决赛"),        # full-width, lower-cased
    ("e08", ["２０２０年"], "2020年"),                # full-width digits are other characters
    ("e09", ["8848.86米"], "8848.86"),
    ("e10", ["93.4%"], "93.4"),                      # "%" is not removed
    ("e11", ["4比2", "以4比2"], "4比2击败"),
    ("e12", ["长江"], None),
    ("e13", ["黄河"], ""),
    ("e14", ["Apple Inc."], "Apple Inc"),            # "." is not removed
    ("e15", ["1405-1433"], "14051433"),              # "-" is removed
    ("e16", ["等等……"], "等等"),                      # a single "…" is not removed
    ("e17", ["“鸿蒙”"], "鸿蒙"),
    ("e18", ["「鸿蒙」"], "鸿蒙"),
    ("e19", ["iPhone 4S"], "iPhone4S"),
    ("e20", ["北京大学"], "北京 大学"),
    ("e21", ["鿏Mt"], "Mt"),                         # U+9FCF is past the official U+9FA5
    ("e22", ["红茶绿茶"], "绿茶红茶"),                # a substring, not a bag of characters
    ("e23", ["北京故宫博物院"], "北京博物院"),
    ("e24", ["臺灣"], "台湾"),
    ("e25", ["1,000万"], "1000万"),
    ("e26", ["700T型"], "700T"),
    ("e27", ["4:2"], "42"),                          # ":" is removed
    ("e28", ["Guido van Rossum"], "van Rossum"),
    ("e29", ["HarmonyOS"], "harmonyos"),
    ("e30", [" 上海 "], "上海"),
    ("e31", ["蒂姆·库克"], "蒂姆库克"),
    ("e32", ["竹子"], "竹子。"),
    ("e33", ["(BYD)"], "BYD"),                       # ASCII parentheses stay
    ("e34", ["（BYD）"], "BYD"),                     # full-width ones are removed
    ("e35", ["长征五号", "长征五号遥五运载火箭", "火箭"], "长征五号遥五"),
    ("e36", ["C++"], "C"),                           # "+" is removed
    ("e37", ["Edmund Hillary"], "Edmund Hillary与丹增"),
    ("e38", ["七次"], "七次下西洋"),
    ("e39", ["2007年1月5日"], "2007年1月5日通车"),
    ("e40", ["第73届雨果奖"], "第73届"),
    ("e41", ["William C. Campbell"], "Campbell"),
    ("e42", ["12到38公斤"], "12到38公斤的竹子"),
]


def build_eval():
    """(gold SQuAD-layout dict, predictions dict) of `EVAL_ITEMS`."""
    data = []
    predictions = {}
    for qid, golds, prediction in EVAL_ITEMS:
        context = "".join(golds)
        qas = [{"id": qid, "question": "？", "answers": [
            {"text": gold, "answer_start": context.index(gold)} for gold in golds]}]
        data.append({"title": qid, "paragraphs": [{"context": context, "qas": qas}]})
        if prediction is not None:
            predictions[qid] = prediction
    return {"version": "v1.1", "data": data}, predictions


def build():
    """The SQuAD-layout dict of `PARAGRAPHS`."""
    data = []
    for title, context, questions in PARAGRAPHS:
        qas = []
        for qid, question, answer, occurrence in questions:
            start = -1
            for _ in range(occurrence + 1):
                start = context.index(answer, start + 1)
            qas.append({"id": qid, "question": question,
                        "answers": [{"text": answer, "answer_start": start}]})
        data.append({"title": title, "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v1.1", "data": data}


def _write(name, obj):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    _write("cmrc_small.json", build())
    gold, predictions = build_eval()
    _write("cmrc_eval.json", gold)
    _write("cmrc_eval_predictions.json", predictions)


if __name__ == "__main__":
    main()
